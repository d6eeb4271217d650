"""Operator data paths in the worker: set listings, export and import of items, store snapshots.

Export goes through the worker because only the worker opens the store (the embedded engine
is one process's). It is paged by the caller: one call returns a set's item ids in insertion
order, the next calls return items (and vectors) for slices of them. Import writes exported
items back as they were (ids, order, times, metadata), so re-running an interrupted import
overwrites instead of duplicating; items without a vector are embedded on the way in.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from memory_core.core.errors import ConflictError, InvalidRequestError
from memory_core.core.files import disk_usage
from memory_core.core.messages import (
    BackupReply,
    BackupRequest,
    ExportedItem,
    ExportReply,
    ExportRequest,
    ImportRequest,
    ListSetsRequest,
    SetInfo,
    SetsReply,
)
from memory_core.core.models import Scope
from memory_core.core.validation import parse
from memory_core.engine.service import MemoryService, embedding_text
from memory_core.engine.stores import ItemRecord
from memory_core.engine.stores.base import require_set

logger = logging.getLogger(__name__)

MAX_SETS = 10_000
"""A listing stops here (a namespace with more sets is listed key by key)."""


class Transfer:
    """Listing, export, import and snapshots over one worker's store."""

    def __init__(self, memory: MemoryService, backup_dir: Path) -> None:
        self.memory = memory
        self.store = memory.store
        self.backup_dir = backup_dir

    def list_sets(self, raw: dict[str, Any]) -> SetsReply:
        """The namespace's sets (or one key's), by key then name, with their sizes."""
        request = parse(ListSetsRequest, raw, "list_sets request")
        if request.key is not None:
            found = [(request.key, d) for d in self.store.sets_of(request.namespace, request.key)]
        else:
            everything = self.store.list_sets(MAX_SETS)
            found = sorted(
                ((k, d) for ns, k, d in everything if ns == request.namespace), key=lambda p: (p[0], p[1].name)
            )
        return SetsReply(
            sets=[
                SetInfo(key=key, definition=d, size=self.store.count(Scope(request.namespace, key, d.name)))
                for key, d in found
            ]
        )

    def export(self, raw: dict[str, Any]) -> ExportReply:
        """The set's item ids in insertion order (no ``ids``), or those items with their vectors if asked."""
        request = parse(ExportRequest, raw, "export request")
        require_set(self.store, request.scope)
        if request.ids is None:
            return ExportReply(ids=[item.id for item in self.store.list_items(request.scope)])
        items = self.store.retrieve(request.scope, request.ids)
        vectors = self.store.item_vectors(request.scope, [i.id for i in items]) if request.vectors else {}
        return ExportReply(items=[ExportedItem(item=i, vector=vectors.get(i.id)) for i in items])

    def import_items(self, raw: dict[str, Any]) -> int:
        """Writes the items as exported (re-embedding the ones without a vector); returns how many."""
        request = parse(ImportRequest, raw, "import request")
        definition = require_set(self.store, request.scope)
        dimension = self.memory.embedder.dimension
        for n, exported in enumerate(request.items):
            if exported.vector is not None and len(exported.vector) != dimension:
                raise InvalidRequestError(
                    f"item {n} ({exported.item.id!r}) has a vector of {len(exported.vector)} numbers; "
                    f"this store's model ({self.memory.embedder.model_name}) makes {dimension}: "
                    "export without vectors to re-embed"
                )
            if exported.item.memory_set_name != request.set_name:
                raise InvalidRequestError(
                    f"item {n} ({exported.item.id!r}) belongs to set {exported.item.memory_set_name!r}, "
                    f"not {request.set_name!r}"
                )
        missing = [e for e in request.items if e.vector is None]
        fresh = iter(self.memory.embed(request.namespace, [embedding_text(e.item) for e in missing], written=True))
        records = [
            ItemRecord(
                item=e.item.model_copy(update={"score": None}),
                seq=e.item.seq if e.item.seq is not None else n,
                vector=e.vector if e.vector is not None else next(fresh),
            )
            for n, e in enumerate(request.items)
        ]
        self.store.upsert(request.scope, records, context_window=definition.context_window)
        if self.memory.coordinator is not None:
            self.memory.coordinator.bump(request.scope)  # cached reads of this set are stale now
        return len(records)

    def backup(self, raw: dict[str, Any]) -> BackupReply:
        """A consistent snapshot of the whole store, as ``<backup dir>/<label>`` (or server snapshots)."""
        request = parse(BackupRequest, raw, "backup request")
        target = self.backup_dir.resolve() / request.label
        if target.exists():
            raise ConflictError(f"backup {request.label!r} exists already at {target}; pick another label")
        parts = self.store.snapshot(target)
        size = disk_usage(target) if target.exists() else 0
        logger.warning("store snapshot %r taken (%d bytes on disk): %s", request.label, size, ", ".join(parts))
        return BackupReply(location=str(target), parts=parts, bytes_on_disk=size)
