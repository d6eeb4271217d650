"""Maintenance tasks sent by beat; each is single-flight per tick (see memory_core.engine.maintenance)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from memory_core.core import routing
from memory_core.workers.base import MemoryTask


@shared_task(name=routing.TTL_SWEEP, bind=True, base=MemoryTask)
def ttl_sweep(self: MemoryTask) -> dict[str, Any]:
    """Delete expired, unpinned items."""
    return self.services.maintenance.ttl_sweep().model_dump(mode="json")


@shared_task(name=routing.FLUSH_ACCESS, bind=True, base=MemoryTask)
def flush_access(self: MemoryTask) -> dict[str, Any]:
    """Write recorded read times to the store in bulk."""
    return self.services.maintenance.flush_access().model_dump(mode="json")


@shared_task(name=routing.OPTIMIZE, bind=True, base=MemoryTask)
def optimize(self: MemoryTask) -> dict[str, Any]:
    """Build the store's search indexes over recent writes."""
    return self.services.maintenance.optimize().model_dump(mode="json")


@shared_task(name=routing.EVICT, bind=True, base=MemoryTask)
def evict(self: MemoryTask) -> dict[str, Any]:
    """Apply eviction policies down to each set's max_items."""
    return self.services.maintenance.evict().model_dump(mode="json")
