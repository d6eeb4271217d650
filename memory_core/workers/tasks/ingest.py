"""Write-queue tasks: set administration, add, delete."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from memory_core.core import routing
from memory_core.workers.base import MemoryTask


@shared_task(name=routing.CREATE_SET, bind=True, base=MemoryTask)
def create_set(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Get-or-create a memory set definition."""
    return self.services.memory.create_set(request).model_dump(mode="json")


@shared_task(name=routing.DELETE_SET, bind=True, base=MemoryTask)
def delete_set(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Delete a memory set and its items."""
    return self.services.memory.delete_set(request).model_dump(mode="json")


@shared_task(name=routing.ADD, bind=True, base=MemoryTask)
def add(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Embed and upsert items (idempotent), embedded together with other adds in flight."""
    return self.services.add(request).model_dump(mode="json")


@shared_task(name=routing.FORGET, bind=True, base=MemoryTask)
def forget(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Erase a namespace, or one key of it, from every store."""
    return self.services.eraser.forget(request).model_dump(mode="json")


@shared_task(name=routing.DELETE, bind=True, base=MemoryTask)
def delete(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Delete items by id, or all items of a set."""
    return self.services.memory.delete(request).model_dump(mode="json")
