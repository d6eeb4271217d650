"""What the reindex tests share: a worker of their own, and the two collections of a store read side by side."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from memory_core.client import MemoryClient
from memory_core.client.admin import Admin
from memory_core.core.messages import ReindexStatus
from memory_core.core.settings import QdrantSettings
from memory_core.engine.stores import collection_name, meta_collection_name
from memory_core.engine.stores.edge import EdgeVectorStore

VOLATILE = frozenset({"keep_until"})
"""A tombstone's expiry is set by each collection's own write of the delete (a mirrored one is a moment later)."""


def points_of(store: EdgeVectorStore) -> dict[str, dict[str, Any]]:
    """Every point of the store's items collection (tombstones too) by id: its payload without ``VOLATILE``."""
    found: dict[str, dict[str, Any]] = {}
    cursor: str | None = "00000000-0000-0000-0000-000000000000"
    while cursor is not None:
        points, cursor = store.scan(cursor, None, 1000)
        found.update({p.id: {k: v for k, v in p.payload.items() if k not in VOLATILE} for p in points})
    return found


def both_collections(path: Path, source_model: str, target: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The points of the store's open collection and of collection ``target`` (workers stopped)."""
    settings = QdrantSettings(path=path)
    store = EdgeVectorStore(
        path, collection=collection_name(settings, source_model), dimension=384, meta=meta_collection_name(settings)
    )
    try:
        other = store.open_sibling(target, 384)
        try:
            return points_of(store), points_of(other)
        finally:
            other.close()
    finally:
        store.close()


def follow(admin: Admin, timeout: float = 240) -> ReindexStatus:
    """Polls the status (which resumes stalled parts, as the CLI does) until the reindex is no longer building
    and owes the new collection nothing. A write made after its range's check pass is owed and copied by the
    catch-up, which may still be waiting out its poll when the last part completes: the collections agree only
    once it has run."""
    deadline = time.monotonic() + timeout
    status = admin.reindex("status")
    while status.state == "building" or (status.state == "complete" and status.owed):
        assert time.monotonic() < deadline, f"reindex still building after {timeout} s: {status}"
        time.sleep(0.5)
        status = admin.reindex("status")
    return status


def admin_of(client: MemoryClient) -> Admin:
    return Admin(client)
