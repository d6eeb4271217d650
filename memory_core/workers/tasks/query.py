"""Read-queue tasks: get, search, size, set lookup, recall, and the console's browse and explain."""

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


@shared_task(name=routing.BROWSE, bind=True, base=MemoryTask)
def browse(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """One page of a set's items, filtered and sorted, with the next page's cursor; records no access."""
    return self.services.browsing.browse(request).model_dump(mode="json")


@shared_task(name=routing.EXPLAIN, bind=True, base=MemoryTask)
def explain(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """A search's hits with each ranker's part in their scores; records no access."""
    return self.services.browsing.explain(request).model_dump(mode="json")
