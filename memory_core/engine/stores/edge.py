"""The embedded default: Qdrant Edge (``qdrant-edge-py``) shards in a local data directory.

One shard holds the items of one embedding model (like one collection on a
server); a second small shard holds the set registry. A shard directory can be
opened by one process only (its WAL is locked), so in embedded mode exactly one
worker process owns the store and serves the others through tasks; the worker
uses a thread pool for concurrency. Writes are serialized by a lock here; reads
run concurrently.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import qdrant_edge as qe

from memory_core.core.errors import StoreError
from memory_core.core.files import copy_tree_sparse
from memory_core.core.messages import BrowseQuery, Explained
from memory_core.core.models import MemorySet, MemorySetItem, Scope, SearchMode
from memory_core.core.store_owner import StoreOwner
from memory_core.engine.embedders.base import EmbedderFingerprint
from memory_core.engine.stores import edge_filters, edge_shards
from memory_core.engine.stores.base import (
    INTEGER_INDEX_FIELDS,
    ITEM_INDEX_FIELDS,
    LEXICAL,
    LEXICAL_FLOOR,
    NUMERIC_INDEX_FIELDS,
    PREFETCH,
    PREVIOUS_MARGIN,
    SPARSE_NAMES,
    TOMBSTONE_TTL,
    ItemRecord,
    RawPoint,
    SparseVector,
    copies_by_kind,
    due,
    from_payload,
    fused_hybrid,
    fused_items,
    in_scope,
    is_visible,
    newest_records,
    oldest_by_hash,
    owed_payload,
    point_id,
    previous_texts,
    scanned_page,
    set_from_payload,
    set_point_id,
    set_to_payload,
    sort_by_seq,
    to_payload,
    tombstone_payload,
    with_context,
)
from memory_core.engine.stores.edge_filters import OWED as _OWED
from memory_core.engine.stores.edge_filters import TOMBSTONE as _TOMBSTONE
from memory_core.engine.stores.edge_filters import bound, browse_filters, searched
from memory_core.engine.stores.edge_filters import sweepable as _sweepable
from memory_core.engine.stores.edge_filters import visible_in as _visible_in
from memory_core.engine.stores.edge_shards import (
    SCROLL_PAGE,
    holds_data,
    holds_points,
    items_config,
    open_shard,
    registry_config,
    translated,
)
from memory_core.engine.stores.fingerprints import (
    FINGERPRINT_RECORD,
    META_SUFFIX,
    fingerprint_from_payload,
    fingerprint_payload,
    record_point,
    settle_fingerprint,
)
from memory_core.engine.stores.migration import layout_source, migrate_spilled, spill_layout
from memory_core.engine.stores.paging import (
    TEXT_INDEX_FIELDS,
    Bound,
    Payload,
    Scroll,
    browse_page,
    explained,
    explained_dense,
    hybrid_parts,
    keyset_page,
    lexical_parts,
    union,
)

logger = logging.getLogger(__name__)

DENSE = edge_shards.DENSE
SPILL_SUFFIX = "__migration.spill"
"""The file beside the shards that a layout migration reads the old shard into (``stores.migration``)."""
_EarlierShard = edge_shards.EarlierShard
_scope_filter, _expired = edge_filters.scope_filter, edge_filters.expired


def _keyed(hits: Sequence[qe.ScoredPoint], ids: dict[int, Any]) -> list[tuple[int, float]]:
    """``hits`` as (the int of the point's UUID, score); ``ids`` maps each int back to the UUID."""
    ranking = []
    for hit in hits:
        point = cast(uuid.UUID, hit.id)
        ids[point.int] = point
        ranking.append((point.int, hit.score))
    return ranking


def _sparse(vector: SparseVector) -> qe.SparseVector:
    return qe.SparseVector(list(vector.indices), list(vector.values))


class EdgeVectorStore:
    """Items and set definitions in embedded Qdrant Edge shards under ``path``."""

    def __init__(
        self,
        path: Path,
        *,
        collection: str,
        dimension: int,
        earlier: Sequence[str] = (),
        tombstone_ttl: float = TOMBSTONE_TTL,
        meta: str | None = None,
        fingerprint: EmbedderFingerprint | None = None,
        legacy: Mapping[str, Callable[[], EmbedderFingerprint]] | None = None,
    ) -> None:
        """``earlier``: the collections of earlier layouts, newest first; a new store is filled from the first found.

        ``meta``: the shard of the store's fingerprint (default ``<collection>__meta``). ``fingerprint``: the
        embedder's; a store that records another refuses to open (``settle_fingerprint``, which ``legacy``
        is for). Checked before the items shard is opened or created.
        """
        self._path = path
        self._collection = collection
        self._tombstone_ttl = tombstone_ttl
        self._write_lock = threading.Lock()
        owner = StoreOwner(path)  # first: a second opener is told who holds the store, by name
        self._owner: StoreOwner | None = owner
        self._meta: qe.EdgeShard | None = None
        try:
            self._meta_dir = path / (meta or f"{collection}{META_SUFFIX}")
            self._meta = open_shard(self._meta_dir, registry_config())
            # A reindexed store's items may live in a collection other than the model's default name.
            self._collection = settle_fingerprint(self, fingerprint, legacy or {}) or collection
            self._open(path, self._collection, dimension, earlier)
        except BaseException:
            if self._meta is not None:
                self._meta.close()
            owner.release()
            raise

    @property
    def collection(self) -> str:
        return self._collection

    def open_sibling(self, collection: str, dimension: int) -> EdgeVectorStore:
        if collection == self._collection:
            raise StoreError(f"collection {collection!r} is the one this store has open")
        # This process already owns the directory; the sibling opens only its own two shards.
        sibling = EdgeVectorStore.__new__(EdgeVectorStore)
        sibling._path, sibling._collection, sibling._tombstone_ttl = self._path, collection, self._tombstone_ttl
        sibling._write_lock, sibling._owner, sibling._meta = threading.Lock(), None, None
        sibling._meta_dir = self._meta_dir
        sibling._open(self._path, collection, dimension, ())
        return sibling

    def drop_collection(self, collection: str) -> bool:
        if collection == self._collection:
            raise StoreError(f"collection {collection!r} is the one this store has open; it cannot be dropped")
        found = False
        for name in (collection, f"{collection}__sets"):
            if (self._path / name).is_dir():
                shutil.rmtree(self._path / name)
                found = True
        return found

    def read_record(self, name: str) -> dict[str, Any] | None:
        with translated("record read"):
            records = self._shard_meta().retrieve([record_point(name)], with_payload=True, with_vector=False)
        return dict(records[0].payload) if records and records[0].payload else None

    def write_record(self, name: str, payload: Mapping[str, Any]) -> None:
        point = qe.Point(record_point(name), {DENSE: [1.0]}, dict(payload))
        self._update(self._shard_meta(), qe.UpdateOperation.upsert_points([point]), "record write")
        with self._write_lock, translated("record flush"):
            self._shard_meta().flush()  # a record the next open must find, whatever happens to this process

    def scan(self, start: str, stop: str | None, limit: int) -> tuple[list[RawPoint], str | None]:
        request = qe.ScrollRequest(offset=start, limit=limit, with_payload=True, with_vector=list(SPARSE_NAMES))
        with translated("scan"):
            records, offset = self._items.scroll(request)
        return scanned_page(((r.id, r.payload, r.vector) for r in records), offset, stop)

    def versions(self, ids: Sequence[str]) -> dict[str, tuple[int, bool]]:
        with translated("retrieve"):
            held = self._items.retrieve(list(ids), with_payload=["seq", "tombstone"], with_vector=False)
        return {str(r.id): (int(r.payload["seq"]), bool(r.payload.get("tombstone"))) for r in held if r.payload}

    def copy_in(self, points: Sequence[tuple[RawPoint, Sequence[float] | None]]) -> int:
        written = 0
        for deleting, batch in copies_by_kind(points):
            vectors = {
                point.id: {} if dense is None else {DENSE: list(map(float, dense)), **self._sparse_of(point)}
                for point, dense in batch
            }
            written += self._write_newer(
                {p.id: (int(p.payload["seq"]), qe.Point(p.id, vectors[p.id], p.payload)) for p, _ in batch},
                deleting=deleting,
            )
        return written

    def raw_points(self, ids: Sequence[str]) -> dict[str, RawPoint]:
        if not ids:
            return {}
        with translated("retrieve"):
            records = self._items.retrieve(list(ids), with_payload=True, with_vector=list(SPARSE_NAMES))
        points, _ = scanned_page(((r.id, r.payload, r.vector) for r in records), None, None)
        return {point.id: point for point in points}

    def owe(self, scope: Scope, versions: Mapping[str, int]) -> None:
        placeholders = {
            point_id(scope, item_id): (
                seq - 1,
                qe.Point(point_id(scope, item_id), {}, owed_payload(scope, item_id, seq)),
            )
            for item_id, seq in versions.items()
        }
        if placeholders:
            self._write_newer(placeholders, deleting=False)

    def owed(self, limit: int) -> list[str]:
        with translated("scroll"):
            records, _ = self._items.scroll(qe.ScrollRequest(limit=limit, filter=_OWED, with_payload=False))
        return [str(r.id) for r in records]

    def owed_count(self) -> int:
        with translated("count"):
            return int(self._items.count(qe.CountRequest(exact=True, filter=_OWED)))

    def remove_unchanged(self, held: Mapping[str, int]) -> int:
        if not held:
            return 0
        with self._write_lock, translated("delete"):
            records = self._items.retrieve(list(held), with_payload=["seq"], with_vector=False)
            doomed: list[Any] = [r.id for r in records if r.payload and int(r.payload["seq"]) == held[str(r.id)]]
            if doomed:
                self._items.update(qe.UpdateOperation.delete_points(doomed))
            return len(doomed)

    @staticmethod
    def _sparse_of(point: RawPoint) -> dict[str, Any]:
        return {name: _sparse(vector) for name, vector in point.sparse.items()}

    def point_count(self) -> int:
        with translated("count"):
            return int(self._items.count(qe.CountRequest(exact=True)))

    def holds_collection(self, name: str) -> bool:
        """Whether the store's directory holds a shard of this name with data."""
        return holds_data(self._path / name)

    def filled_collections(self) -> list[str]:
        """The shards of the store's directory, but its metadata, that hold a point (``settle_fingerprint``)."""
        shards = [d for d in sorted(self._path.iterdir()) if d != self._meta_dir and d.is_dir() and holds_data(d)]
        return [shard.name for shard in shards if holds_points(shard)]

    def recorded_fingerprint(self) -> EmbedderFingerprint | None:
        return fingerprint_from_payload(self.read_record(FINGERPRINT_RECORD), str(self._meta_dir))

    def record_fingerprint(self, fingerprint: EmbedderFingerprint) -> None:
        self.write_record(FINGERPRINT_RECORD, fingerprint_payload(fingerprint, self._collection))

    def _shard_meta(self) -> qe.EdgeShard:
        if self._meta is None:
            raise StoreError(f"the store at {self._path} is closed")
        return self._meta

    def _open(self, path: Path, collection: str, dimension: int, earlier: Sequence[str]) -> None:
        fresh = not (path / collection).is_dir() or not any((path / collection).iterdir())
        self._items_dir, self._sets_dir = path / collection, path / f"{collection}__sets"
        # Decided (and recorded) before the shards are created: a kill right after still resumes the migration.
        source = layout_source(self, collection, earlier, fresh=fresh) if earlier else None
        self._items = open_shard(path / collection, items_config(dimension))
        self._sets = open_shard(path / f"{collection}__sets", registry_config())
        for shard in (self._items, self._sets):
            self._index(shard)
        if source is None:
            if earlier:  # a migration completed: its spill file goes, if a kill left it behind
                self._spill_path().unlink(missing_ok=True)
            return
        try:
            self._migrate(source, dimension)
        except BaseException:
            for shard in (self._items, self._sets):  # the next open resumes; it must find them unlocked
                shard.close()
            raise

    def _index(self, shard: qe.EdgeShard) -> None:
        existing = shard.info().payload_schema
        with translated("payload index creation"):
            for field in ITEM_INDEX_FIELDS:
                if field not in existing:
                    params = qe.KeywordIndexParams(is_tenant=field == "namespace")
                    shard.update(qe.UpdateOperation.create_field_index(field, params))
            for field in NUMERIC_INDEX_FIELDS:
                if field not in existing:
                    integer = field in INTEGER_INDEX_FIELDS
                    schema = qe.PayloadSchemaType.Integer if integer else qe.PayloadSchemaType.Float
                    shard.update(qe.UpdateOperation.create_field_index(field, schema))
            for field in TEXT_INDEX_FIELDS:  # a browse's ``contains``: words, lower-cased
                if field not in existing:
                    words = qe.TextIndexParams(tokenizer=qe.TokenizerType.Word, lowercase=True)
                    shard.update(qe.UpdateOperation.create_field_index(field, words))

    def _migrate(self, source: str, dimension: int) -> None:
        """Fills this store from the shards of an earlier layout (``stores.migration``), or finishes doing so.

        The old shard is read into a spill file and closed before the copy, so the process never holds both
        shards. The old shards stay where they are (a backup) and are never opened again once the migration
        completes.
        """
        registry = self._path / f"{source}__sets"
        definitions: list[dict[str, Any]] = []
        if registry.is_dir():
            old_sets = open_shard(registry, registry_config())
            try:
                definitions = list(self._scroll(old_sets, None))
            finally:
                old_sets.close()
        spill = self._spill_path()
        if not spill.is_file():  # else a killed migration's: the same points in the same order
            old_items = _EarlierShard(self._path / source, dimension)
            try:
                spill_layout(old_items, spill)
            finally:
                old_items.close()
        total = migrate_spilled(spill, source, self, self._collection, definitions, reload=self._reload_items)
        spill.unlink()
        logger.warning(
            "migrated %d items from %s to the current layout at %s; the old directory is kept as a backup",
            total,
            self._path / source,
            self._path,
        )

    def _spill_path(self) -> Path:
        return self._path / f"{self._collection}{SPILL_SUFFIX}"

    def _reload_items(self) -> None:
        """Loads the items shard again (a long migration's copy: see ``migrate_spilled``)."""
        with self._write_lock, translated("shard reload"):
            self._items.flush()
            self._items.close()
            self._items = qe.EdgeShard.load(str(self._items_dir))

    @staticmethod
    def _sparse_for(text: str, previous: list[str]) -> dict[str, Any]:
        return {name: _sparse(v) for name, v in LEXICAL.item_vectors(text, previous).items()}

    @property
    def location(self) -> str:
        return str(self._path.resolve())

    def _update(self, shard: qe.EdgeShard, operation: qe.UpdateOperation, what: str) -> None:
        with self._write_lock, translated(what):
            shard.update(operation)

    def upsert(self, scope: Scope, records: Sequence[ItemRecord], *, context_window: int = 0) -> None:
        records = newest_records(records)
        if not records:
            return
        before = self._previous(scope, min(r.seq for r in records), context_window) if context_window else []
        points = {
            point_id(scope, r.item.id): (
                r.seq,
                qe.Point(
                    point_id(scope, r.item.id),
                    {DENSE: list(map(float, r.vector)), **self._sparse_for(str(r.item.value), previous)},
                    to_payload(scope, r),
                ),
            )
            for r, previous in with_context(records, before, context_window)
        }
        self._write_newer(points, deleting=False)

    def _write_newer(self, points: Mapping[str, tuple[int, qe.Point]], *, deleting: bool) -> int:
        """Writes the points (point id -> its write's seq and point) over whatever is stored older (``due``).

        This process owns the shard and every write holds the lock, so reading what is stored and writing
        cannot be interleaved by another writer.
        """
        with self._write_lock, translated("delete" if deleting else "upsert"):
            held = self._items.retrieve(list(points), with_payload=["seq", "tombstone"], with_vector=False)
            stored = {str(r.id): (int(r.payload["seq"]), bool(r.payload.get("tombstone"))) for r in held if r.payload}
            wanted = due(stored, {pid: seq for pid, (seq, _) in points.items()}, deleting=deleting)
            if wanted:
                self._items.update(qe.UpdateOperation.upsert_points([points[pid][1] for pid in wanted]))
            return len(wanted)

    def _previous(self, scope: Scope, before_seq: int, count: int) -> list[str]:
        """Texts of the ``count`` items of the set just before ``before_seq``, oldest first."""
        loose = qe.FieldCondition(key="seq", range=qe.RangeFloat(lte=float(before_seq) + PREVIOUS_MARGIN))
        request = qe.ScrollRequest(
            limit=count + 64,  # the loose bound may let a few later items through; they are dropped below
            filter=qe.Filter(must=[*_scope_filter(*scope), loose], must_not=[_TOMBSTONE]),
            with_payload=True,
            order_by=qe.OrderBy("seq", direction=qe.Direction.Desc),
        )
        with translated("scroll"):
            records, _ = self._items.scroll(request)
        return previous_texts([r.payload for r in records if r.payload is not None], before_seq, count)

    def retrieve(self, scope: Scope, item_ids: Sequence[str]) -> list[MemorySetItem]:
        ids: list[Any] = [point_id(scope, i) for i in dict.fromkeys(item_ids)]
        with translated("retrieve"):
            records = self._items.retrieve(ids, with_payload=True, with_vector=False)
        now = time.time()
        # The point id already encodes the scope; checking the payload too costs nothing and guards the invariant.
        pairs = [
            (r.payload["seq"], from_payload(r.payload))
            for r in records
            if r.payload and in_scope(r.payload, scope) and is_visible(r.payload, now)
        ]
        return sort_by_seq(pairs)

    def _scroll(self, shard: qe.EdgeShard, scroll_filter: qe.Filter | None) -> Iterator[dict[str, Any]]:
        offset: Any = None
        while True:
            request = qe.ScrollRequest(offset=offset, limit=SCROLL_PAGE, filter=scroll_filter, with_payload=True)
            with translated("scroll"):
                records, offset = shard.scroll(request)
            for record in records:
                if record.payload is not None:
                    yield record.payload
            if offset is None:
                return

    def list_items(self, scope: Scope) -> list[MemorySetItem]:
        payloads = self._scroll(self._items, _visible_in(*scope))
        return sort_by_seq([(p["seq"], from_payload(p)) for p in payloads])

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
        visible = searched(scope, filters, include_superseded)
        dense = qe.Query.Nearest(list(map(float, vector)), using=DENSE)
        rankers = 1
        if mode == "dense" or not text or not text.strip():
            request = qe.QueryRequest(limit=limit, query=dense, filter=visible, with_payload=True)
        elif mode == "hybrid":
            return self._hybrid(dense, _sparse(LEXICAL.query(text)), visible, limit)
        else:
            words = _sparse(LEXICAL.query(text))
            depth = max(PREFETCH, limit)
            prefetches = [
                qe.Prefetch(
                    limit=depth,
                    query=qe.Query.Nearest(words, using=name),
                    filter=visible,
                    score_threshold=LEXICAL_FLOOR,
                )
                for name in SPARSE_NAMES
            ]
            rankers = len(prefetches)
            request = qe.QueryRequest(
                limit=limit,
                prefetches=prefetches,
                query=qe.Fusion.Dbsf(),  # type: ignore[arg-type]  # the stubs type Fusion's variants as nested classes
                filter=visible,
                with_payload=True,
            )
        with translated("search"):
            hits = self._items.query(request)
        # A fused score is a sum over the rankers, each scaled to about 0..1: report their mean, capped at 1.
        return [from_payload(h.payload, score=min(1.0, h.score / rankers)) for h in hits if h.payload is not None]

    def _hybrid(self, dense: Any, words: qe.SparseVector, visible: qe.Filter, limit: int) -> list[MemorySetItem]:
        """Each ranker's candidates in one batch (each lexical ranker evaluated once), their cosines, then the
        fused best with their payloads: ``fused_hybrid``."""
        dense_ranking, lexical, cosines, ids = self._rankings(dense, words, visible, limit)
        best = fused_hybrid(dense_ranking, lexical, cosines, limit)
        return fused_items(best, self._payloads(ids, [point for point, _ in best]))

    def _rankings(
        self, dense: Any, words: qe.SparseVector, visible: qe.Filter, limit: int, *, lexical_only: bool = False
    ) -> tuple[list[tuple[int, float]], list[list[tuple[int, float]]], dict[int, float], dict[int, Any]]:
        """The dense and lexical rankings of a hybrid search (keyed by the int of each point's UUID), the lexical
        candidates' cosines, and the UUID of each int. ``lexical_only``: the lexical rankings alone."""
        depth = max(PREFETCH, limit)
        rankers = [] if lexical_only else [qe.QueryRequest(limit=depth, query=dense, filter=visible)]
        rankers += [
            qe.QueryRequest(
                limit=depth, query=qe.Query.Nearest(words, using=name), filter=visible, score_threshold=LEXICAL_FLOOR
            )
            for name in SPARSE_NAMES
        ]
        with translated("search"):
            hits = self._items.query_batch(qe.QueryBatchRequest(rankers))
            # Each read of ``hit.id`` builds a UUID, whose hash is Python code: read it once and key by its int.
            ids: dict[int, Any] = {}
            rankings = [_keyed(ranker_hits, ids) for ranker_hits in hits]
            dense_ranking, lexical = ([], rankings) if lexical_only else (rankings[0], rankings[1:])
            candidates = {point for ranking in lexical for point, _ in ranking}
            cosines: dict[int, float] = {}
            if candidates and not lexical_only:
                # Exact: the filter holds at most ``depth`` ids a lexical ranker, so no index walk.
                only = qe.Filter(must=[qe.HasIdCondition({ids[point] for point in candidates})])
                rescored = self._items.query(qe.QueryRequest(limit=len(candidates), query=dense, filter=only))
                cosines = dict(_keyed(rescored, {}))
        return dense_ranking, lexical, cosines, ids

    def _payloads(self, ids: Mapping[int, Any], points: Sequence[int]) -> dict[int, dict[str, Any] | None]:
        with translated("retrieve"):
            records = self._items.retrieve([ids[point] for point in points], with_payload=True, with_vector=False)
        return {cast(uuid.UUID, record.id).int: record.payload for record in records}

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
        if mode == "dense" or not text.strip():
            return explained_dense(self.search(scope, vector, limit, filters, include_superseded=include_superseded))
        visible = searched(scope, filters, include_superseded)
        dense = qe.Query.Nearest(list(map(float, vector)), using=DENSE)
        words = _sparse(LEXICAL.query(text))
        dense_ranking, lexical, cosines, ids = self._rankings(
            dense, words, visible, limit, lexical_only=mode != "hybrid"
        )
        best = (
            hybrid_parts(dense_ranking, lexical, cosines, limit) if mode == "hybrid" else lexical_parts(lexical, limit)
        )
        return explained(best, self._payloads(ids, [point for point, _ in best]))

    def page_items(
        self, scope: Scope, query: BrowseQuery, cursor: str | None, limit: int
    ) -> tuple[list[MemorySetItem], str | None]:
        scroll = union([self._ordered(browse) for browse in browse_filters(*scope, query, time.time())])
        return browse_page(
            scope,
            query,
            cursor,
            limit,
            lambda field, after, count: keyset_page(scroll, field, query.descending, after, count),
        )

    def _ordered(self, browse: qe.Filter) -> Scroll:
        def scroll(
            bounds: Sequence[Bound], order: str, descending: bool, start: int | None, count: int
        ) -> list[Payload]:
            direction = qe.Direction.Desc if descending else qe.Direction.Asc
            request = qe.ScrollRequest(
                limit=count,
                filter=qe.Filter(must=[browse, *map(bound, bounds)]),
                with_payload=True,
                order_by=qe.OrderBy(order, direction=direction, start_from=start),
            )
            with translated("browse"):
                records, _ = self._items.scroll(request)
            return [record.payload for record in records if record.payload is not None]

        return scroll

    def count_matching(self, scope: Scope, query: BrowseQuery) -> int:
        with translated("count"):
            return sum(
                int(self._items.count(qe.CountRequest(exact=True, filter=browse)))
                for browse in browse_filters(*scope, query, time.time())
            )

    def count(self, scope: Scope) -> int:
        with translated("count"):
            return self._items.count(qe.CountRequest(exact=True, filter=_visible_in(*scope)))

    def set_fields(
        self, scope: Scope, item_ids: Sequence[str], fields: Mapping[str, Any], *, seq: int | None = None
    ) -> None:
        if not item_ids:
            return
        must: list[Any] = [qe.HasIdCondition({point_id(scope, i) for i in item_ids})]
        if seq is not None:
            must.append(qe.FieldCondition(key="seq", match=qe.MatchValue(seq)))  # integer match: exact
        only_live = qe.Filter(must=must, must_not=[_TOMBSTONE])
        self._update(self._items, qe.UpdateOperation.set_payload_by_filter(only_live, dict(fields)), "payload update")

    def find_by_text_hash(self, scope: Scope, hashes: Sequence[str]) -> dict[str, MemorySetItem]:
        if not hashes:
            return {}
        hash_filter = qe.Filter(
            must=[*_scope_filter(*scope), qe.FieldCondition(key="text_hash", match=qe.MatchAny(list(hashes)))],
            must_not=[_expired(time.time())],
        )
        return oldest_by_hash(self._scroll(self._items, hash_filter))

    def expired(self, now: float, limit: int) -> list[tuple[Scope, str]]:
        found: list[tuple[Scope, str]] = []
        for payload in self._scroll(self._items, qe.Filter(must=[_expired(now)], must_not=[_TOMBSTONE])):
            found.append((Scope(payload["namespace"], payload["key"], payload["set"]), payload["item_id"]))
            if len(found) >= limit:
                break
        return found

    def forget(self, namespace: str, key: str | None) -> tuple[int, list[str]]:
        conditions = [qe.FieldCondition(key="namespace", match=qe.MatchValue(namespace))]
        if key is not None:
            conditions.append(qe.FieldCondition(key="key", match=qe.MatchValue(key)))
        scope_filter = qe.Filter(must=list(conditions))
        with translated("count"):
            items = self._items.count(
                qe.CountRequest(exact=True, filter=qe.Filter(must=[scope_filter], must_not=[_TOMBSTONE]))
            )
        sets = [f"{p['key']}:{p['set']}" for p in self._scroll(self._sets, scope_filter)]
        self._update(self._items, qe.UpdateOperation.delete_points_by_filter(scope_filter), "erasure")
        self._update(self._sets, qe.UpdateOperation.delete_points_by_filter(scope_filter), "erasure")
        return items, sets

    def delete_expired(self, now: float, limit: int) -> int:
        expired = _sweepable(now)
        with translated("count"):
            due = self._items.count(qe.CountRequest(exact=True, filter=expired))
        if due == 0:
            return 0
        if due <= limit:
            self._update(self._items, qe.UpdateOperation.delete_points_by_filter(expired), "expiry delete")
            return due
        request = qe.ScrollRequest(limit=limit, filter=expired, with_payload=False)
        with translated("scroll"):
            records, _ = self._items.scroll(request)
        ids: list[Any] = [r.id for r in records]
        self._update(self._items, qe.UpdateOperation.delete_points(ids), "expiry delete")
        return len(ids)

    def delete(self, scope: Scope, versions: Mapping[str, int]) -> None:
        keep_until = time.time() + self._tombstone_ttl
        tombstones = {
            point_id(scope, item_id): (
                seq,
                qe.Point(point_id(scope, item_id), {}, tombstone_payload(scope, item_id, seq, keep_until)),
            )
            for item_id, seq in versions.items()
        }
        if tombstones:
            self._write_newer(tombstones, deleting=True)

    def item_versions(self, scope: Scope) -> dict[str, int]:
        stored = qe.Filter(must=list(_scope_filter(*scope)), must_not=[_TOMBSTONE])
        return {p["item_id"]: p["seq"] for p in self._scroll(self._items, stored)}

    def put_set(self, namespace: str, key: str, definition: MemorySet) -> None:
        point = qe.Point(
            set_point_id(namespace, key, definition.name), {DENSE: [1.0]}, set_to_payload(namespace, key, definition)
        )
        self._update(self._sets, qe.UpdateOperation.upsert_points([point]), "set registry write")

    def get_set(self, namespace: str, key: str, set_name: str) -> MemorySet | None:
        with translated("set registry read"):
            records = self._sets.retrieve(
                [set_point_id(namespace, key, set_name)], with_payload=True, with_vector=False
            )
        return set_from_payload(records[0].payload) if records and records[0].payload else None

    def delete_set(self, namespace: str, key: str, set_name: str) -> bool:
        existed = self.get_set(namespace, key, set_name) is not None
        operation = qe.UpdateOperation.delete_points([set_point_id(namespace, key, set_name)])
        self._update(self._sets, operation, "set registry delete")
        return existed

    def list_sets(self, limit: int) -> list[tuple[str, str, MemorySet]]:
        found = []
        for payload in self._scroll(self._sets, None):
            found.append((payload["namespace"], payload["key"], set_from_payload(payload)))
            if len(found) >= limit:
                break
        return found

    def sets_of(self, namespace: str, key: str) -> list[MemorySet]:
        scope_filter = qe.Filter(must=list(_scope_filter(namespace, key)))
        return sorted((set_from_payload(p) for p in self._scroll(self._sets, scope_filter)), key=lambda d: d.name)

    def namespace_counts(self, limit: int) -> dict[str, int]:
        # Not a facet: the engine's facet counts miss points written since the shard was opened (0.9.0).
        counts: dict[str, int] = {}
        for namespace, key, definition in self.list_sets(100_000):
            counts[namespace] = counts.get(namespace, 0) + self.count(Scope(namespace, key, definition.name))
        return dict(sorted(counts.items(), key=lambda pair: (-pair[1], pair[0]))[:limit])

    def item_vectors(self, scope: Scope, item_ids: Sequence[str]) -> dict[str, list[float]]:
        ids: list[Any] = [point_id(scope, i) for i in dict.fromkeys(item_ids)]
        with translated("retrieve"):
            records = self._items.retrieve(ids, with_payload=True, with_vector=True)
        found: dict[str, list[float]] = {}
        for r in records:
            dense = r.vector.get(DENSE) if isinstance(r.vector, dict) else None
            if r.payload and in_scope(r.payload, scope) and isinstance(dense, list):
                found[str(r.payload["item_id"])] = [float(x) for x in dense]  # type: ignore[arg-type]  # dense: floats
        return found

    def snapshot(self, target: Path) -> list[str]:
        # Writes wait on the lock while the shards are flushed and copied; reads go on.
        target.mkdir(parents=True, exist_ok=True)
        copied = []
        with self._write_lock:
            shards = (
                (self._items, self._items_dir),
                (self._sets, self._sets_dir),
                (self._shard_meta(), self._meta_dir),
            )
            for shard, directory in shards:
                with translated("flush"):
                    shard.flush()
                copy_tree_sparse(directory, target / directory.name, skip="*.lock")
                copied.append(str(target / directory.name))
        return copied

    def optimize(self) -> bool:
        # Writes wait while the optimizer swaps segments; reads go on. Seconds per 50k new points (DESIGN).
        with translated("optimize"):
            return bool(self._items.optimize())

    def close(self) -> None:
        with self._write_lock:
            try:
                for shard in (self._items, self._sets, self._meta):
                    if shard is None:
                        continue
                    with translated("close"):
                        shard.flush()
                        shard.close()
            finally:
                self._meta = None
                if self._owner is not None:  # a sibling shares its parent's ownership
                    self._owner.release()
