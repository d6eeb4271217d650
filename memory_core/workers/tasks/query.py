"""Read-queue tasks: get, search, size, set lookup."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from memory_core.core import routing
from memory_core.workers.base import MemoryTask


@shared_task(name=routing.GET, bind=True, base=MemoryTask)
def get(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Items by id, or all items, in insertion order."""
    return self.services.memory.get(request).model_dump(mode="json")


@shared_task(name=routing.SEARCH, bind=True, base=MemoryTask)
def search(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Nearest items to a query."""
    return self.services.memory.search(request).model_dump(mode="json")


@shared_task(name=routing.SIZE, bind=True, base=MemoryTask)
def size(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Number of items in a set."""
    return self.services.memory.size(request).model_dump(mode="json")


@shared_task(name=routing.GET_SET, bind=True, base=MemoryTask)
def get_set(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """A set definition, or none."""
    return self.services.memory.get_set(request).model_dump(mode="json")


@shared_task(name=routing.RECALL, bind=True, base=MemoryTask)
def recall(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Scored, deduplicated memories of every tier for a query."""
    return self.services.recaller.recall(request).model_dump(mode="json")
