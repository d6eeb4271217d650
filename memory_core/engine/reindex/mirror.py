"""The serving store with its writes mirrored into a running reindex's target (``MirroringStore``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from memory_core.core.errors import StoreError
from memory_core.core.messages import BrowseQuery, Explained
from memory_core.core.models import MemorySet, MemorySetItem, Scope, SearchMode
from memory_core.engine.embedders.base import EmbedderFingerprint
from memory_core.engine.reindex.reindexer import Reindexer
from memory_core.engine.stores.base import ItemRecord, ReindexableStore, VectorStore

logger = logging.getLogger(__name__)


class MirroringStore:
    """The serving store, whose writes are mirrored into a reindex's target while one runs.

    It implements the whole ``VectorStore`` protocol itself, so a write method added to the protocol later is a
    type error here until it is mirrored (a ``__getattr__`` fallback would let it bypass the target unseen).

    The source is written first, then the target, at once: deletes, field changes, set definitions, erasures
    and the TTL sweep (no model needed), and an owed placeholder for each upsert (its copy is embedded in the
    background). A task killed in between is redelivered and writes both again (every write is idempotent),
    and the reindex's second pass repairs what was missed. A mirror write that fails because the reindex was
    aborted meanwhile (its collection dropped) is dropped too: the write itself succeeded. Reads go to the
    source only.
    """

    def __init__(self, inner: VectorStore, reindexer: Reindexer) -> None:
        self._inner = inner
        self._reindexer = reindexer

    def _mirror(self, write: Callable[[ReindexableStore], object]) -> None:
        target = self._reindexer.target()
        if target is None:
            return
        try:
            write(target.store)
        except StoreError:
            if self._reindexer.target(fresh=True) is not None:
                raise
            logger.info("a mirrored write found the reindex gone (aborted); the write itself is stored")

    # -- writes, mirrored --------------------------------------------------------------------------------------

    def upsert(self, scope: Scope, records: Sequence[ItemRecord], *, context_window: int = 0) -> None:
        self._inner.upsert(scope, records, context_window=context_window)
        target = self._reindexer.target()
        if target is None or not records:
            return
        if target.state != "switched":
            owed = {r.item.id: r.seq for r in records}
            self._mirror(lambda store: store.owe(scope, owed))
            return
        # A worker not restarted after the switch writes the collection the others now serve, which no reindex
        # catches up any more: it embeds for it here, as the switched workers would.
        vectors = target.vectors([str(r.item.value) for r in records])
        mirrored = [ItemRecord(item=r.item, seq=r.seq, vector=v) for r, v in zip(records, vectors, strict=True)]
        self._mirror(lambda store: store.upsert(scope, mirrored, context_window=context_window))

    def delete(self, scope: Scope, versions: Mapping[str, int]) -> None:
        self._inner.delete(scope, versions)
        self._mirror(lambda target: target.delete(scope, versions))

    def set_fields(
        self, scope: Scope, item_ids: Sequence[str], fields: Mapping[str, Any], *, seq: int | None = None
    ) -> None:
        self._inner.set_fields(scope, item_ids, fields, seq=seq)
        self._mirror(lambda target: target.set_fields(scope, item_ids, fields, seq=seq))

    def put_set(self, namespace: str, key: str, definition: MemorySet) -> None:
        self._inner.put_set(namespace, key, definition)
        self._mirror(lambda target: target.put_set(namespace, key, definition))

    def delete_set(self, namespace: str, key: str, set_name: str) -> bool:
        deleted = self._inner.delete_set(namespace, key, set_name)
        self._mirror(lambda target: target.delete_set(namespace, key, set_name))
        return deleted

    def forget(self, namespace: str, key: str | None) -> tuple[int, list[str]]:
        forgotten = self._inner.forget(namespace, key)
        self._mirror(lambda target: target.forget(namespace, key))
        return forgotten

    def delete_expired(self, now: float, limit: int) -> int:
        deleted = self._inner.delete_expired(now, limit)
        self._mirror(lambda target: target.delete_expired(now, limit))
        return deleted

    def record_fingerprint(self, fingerprint: EmbedderFingerprint) -> None:
        self._inner.record_fingerprint(fingerprint)  # the source's own record; the target's is the reindex's

    # -- reads and upkeep, the source's --------------------------------------------------------------------

    @property
    def location(self) -> str:
        return self._inner.location

    def recorded_fingerprint(self) -> EmbedderFingerprint | None:
        return self._inner.recorded_fingerprint()

    def retrieve(self, scope: Scope, item_ids: Sequence[str]) -> list[MemorySetItem]:
        return self._inner.retrieve(scope, item_ids)

    def list_items(self, scope: Scope) -> list[MemorySetItem]:
        return self._inner.list_items(scope)

    def search(
        self,
        scope: Scope,
        vector: Sequence[float],
        limit: int,
        filters: Mapping[str, Any],
        *,
        text: str | None = None,
        mode: SearchMode = "dense",
        include_superseded: bool = False,
    ) -> list[MemorySetItem]:
        return self._inner.search(
            scope, vector, limit, filters, text=text, mode=mode, include_superseded=include_superseded
        )

    def explain(
        self,
        scope: Scope,
        vector: Sequence[float],
        limit: int,
        filters: Mapping[str, Any],
        *,
        text: str,
        mode: SearchMode = "hybrid",
        include_superseded: bool = False,
    ) -> list[Explained]:
        return self._inner.explain(
            scope, vector, limit, filters, text=text, mode=mode, include_superseded=include_superseded
        )

    def page_items(
        self, scope: Scope, query: BrowseQuery, cursor: str | None, limit: int
    ) -> tuple[list[MemorySetItem], str | None]:
        return self._inner.page_items(scope, query, cursor, limit)

    def count_matching(self, scope: Scope, query: BrowseQuery) -> int:
        return self._inner.count_matching(scope, query)

    def count(self, scope: Scope) -> int:
        return self._inner.count(scope)

    def item_versions(self, scope: Scope) -> dict[str, int]:
        return self._inner.item_versions(scope)

    def get_set(self, namespace: str, key: str, set_name: str) -> MemorySet | None:
        return self._inner.get_set(namespace, key, set_name)

    def list_sets(self, limit: int) -> list[tuple[str, str, MemorySet]]:
        return self._inner.list_sets(limit)

    def sets_of(self, namespace: str, key: str) -> list[MemorySet]:
        return self._inner.sets_of(namespace, key)

    def find_by_text_hash(self, scope: Scope, hashes: Sequence[str]) -> dict[str, MemorySetItem]:
        return self._inner.find_by_text_hash(scope, hashes)

    def expired(self, now: float, limit: int) -> list[tuple[Scope, str]]:
        return self._inner.expired(now, limit)

    def namespace_counts(self, limit: int) -> dict[str, int]:
        return self._inner.namespace_counts(limit)

    def item_vectors(self, scope: Scope, item_ids: Sequence[str]) -> dict[str, list[float]]:
        return self._inner.item_vectors(scope, item_ids)

    def snapshot(self, target: Path) -> list[str]:
        return self._inner.snapshot(target)

    def optimize(self) -> bool:
        return self._inner.optimize()

    def close(self) -> None:
        self._reindexer.close()
        self._inner.close()


def mirroring(store: VectorStore, reindexer: Reindexer) -> VectorStore:
    """``store``, its writes mirrored into a running reindex's target."""
    mirrored: VectorStore = MirroringStore(store, reindexer)  # mypy checks the whole protocol here
    return mirrored
