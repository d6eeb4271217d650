"""Operator tasks: set listings, export and import, store snapshots, reindex (``memory-core`` CLI)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from memory_core.core import routing
from memory_core.core.messages import ReindexBatch, ReindexRequest
from memory_core.core.validation import parse
from memory_core.workers.base import MemoryTask


@shared_task(name=routing.LIST_SETS, bind=True, base=MemoryTask)
def list_sets(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """The sets of a namespace (or of one key), with their sizes."""
    return self.services.transfer.list_sets(request).model_dump(mode="json")


@shared_task(name=routing.EXPORT, bind=True, base=MemoryTask)
def export(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """A set's item ids, or some of its items with their vectors."""
    return self.services.transfer.export(request).model_dump(mode="json")


@shared_task(name=routing.IMPORT, bind=True, base=MemoryTask)
def import_items(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Exported items written back as they were (idempotent)."""
    return {"count": self.services.transfer.import_items(request)}


@shared_task(name=routing.BACKUP, bind=True, base=MemoryTask)
def backup(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """A consistent snapshot of the store."""
    return self.services.transfer.backup(request).model_dump(mode="json")


@shared_task(name=routing.REINDEX, bind=True, base=MemoryTask)
def reindex(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Starts, follows, aborts or finishes the re-embedding of the store; (re)enqueues the parts to copy."""
    status, parts = self.services.reindexer.handle(parse(ReindexRequest, request, "reindex request"))
    for part in parts:
        reindex_batch.apply_async(kwargs={"request": {"part": part}})
    return status.model_dump(mode="json")


@shared_task(name=routing.REINDEX_BATCH, bind=True, base=MemoryTask)
def reindex_batch(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Copies one batch of one part of the store into the reindex's collection, then enqueues the next."""
    part = parse(ReindexBatch, request, "reindex batch").part
    delay = self.services.reindexer.run_batch(part)
    if delay is not None:
        reindex_batch.apply_async(kwargs={"request": {"part": part}}, countdown=delay)
    return {"part": part, "more": delay is not None}
