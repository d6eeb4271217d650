"""Compaction tasks: one set on the compaction queue; the sweep on the maintenance queue."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from memory_core.core import routing
from memory_core.core.errors import SummarizerError
from memory_core.workers.base import MemoryTask


@shared_task(
    name=routing.COMPACT, bind=True, base=MemoryTask, autoretry_for=(*MemoryTask.autoretry_for, SummarizerError)
)
def compact(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Fold one set into summaries; summarizer failures retry with backoff, then dead-letter."""
    return self.services.compactor.compact(request).model_dump(mode="json")


@shared_task(name=routing.COMPACTION_SWEEP, bind=True, base=MemoryTask)
def compaction_sweep(self: MemoryTask) -> dict[str, Any]:
    """Enqueue a compaction for every set at or over capacity."""
    services = self.services
    return services.compaction_trigger.sweep(
        services.memory.store, services.settings.compaction.sweep_max_sets
    ).model_dump(mode="json")
