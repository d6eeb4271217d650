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
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from memory_core.core.errors import StoreError, TransientStoreError
from memory_core.core.files import copy_tree_sparse
from memory_core.core.models import MemorySet, MemorySetItem, Scope, SearchMode
from memory_core.core.store_owner import StoreOwner
from memory_core.engine.embedders.base import EmbedderFingerprint
from memory_core.engine.stores.base import (
    INTEGER_INDEX_FIELDS,
    ITEM_INDEX_FIELDS,
    LEXICAL,
    LEXICAL_FLOOR,
    NUMERIC_INDEX_FIELDS,
    PREFETCH,
    PREVIOUS_MARGIN,
    SPARSE_NAMES,
    TIE_BREAK,
    TOMBSTONE_TTL,
    ItemRecord,
    SparseVector,
    context_windows,
    due,
    from_payload,
    in_scope,
    is_visible,
    migrated_vectors,
    newest_records,
    oldest_by_hash,
    point_id,
    previous_texts,
    set_from_payload,
    set_point_id,
    set_to_payload,
    sort_by_seq,
    to_payload,
    tombstone_payload,
    with_context,
)
from memory_core.engine.stores.fingerprints import (
    FINGERPRINT_POINT,
    META_SUFFIX,
    fingerprint_from_payload,
    fingerprint_payload,
    settle_fingerprint,
)

logger = logging.getLogger(__name__)

DENSE = "dense"
_SCROLL_PAGE = 1_000
_TRANSIENT_MARKERS = ("WouldBlock", "timed out", "Timeout", "temporarily")


@contextmanager
def _translated(operation: str) -> Iterator[None]:
    try:
        yield
    except (StoreError, ValueError, TypeError):
        raise
    except Exception as exc:  # qdrant_edge raises bare Exception; translate at the boundary
        message = f"embedded Qdrant {operation} failed: {exc}"
        if any(marker in str(exc) for marker in _TRANSIENT_MARKERS):
            raise TransientStoreError(message) from exc
        raise StoreError(message) from exc


def _scope_filter(namespace: str, key: str, set_name: str | None = None) -> list[qe.FieldCondition]:
    conditions = [
        qe.FieldCondition(key="namespace", match=qe.MatchValue(namespace)),
        qe.FieldCondition(key="key", match=qe.MatchValue(key)),
    ]
    if set_name is not None:
        conditions.append(qe.FieldCondition(key="set", match=qe.MatchValue(set_name)))
    return conditions


def _expired(now: float) -> qe.Filter:
    """Matches items past their expiry that are not pinned; reads put it in ``must_not``."""
    return qe.Filter(
        must=[
            qe.FieldCondition(key="expires_at", range=qe.RangeFloat(lt=now)),
            qe.FieldCondition(key="pinned", match=qe.MatchValue(0)),
        ]
    )


_TOMBSTONE = qe.FieldCondition(key="tombstone", match=qe.MatchValue(1))


def _sweepable(now: float) -> qe.Filter:
    """What the TTL sweep deletes: expired, unpinned items, and tombstones past ``keep_until``."""
    return qe.Filter(must=[_expired(now)], must_not=[qe.FieldCondition(key="keep_until", range=qe.RangeFloat(gte=now))])


def _visible_in(namespace: str, key: str, set_name: str) -> qe.Filter:
    return qe.Filter(must=list(_scope_filter(namespace, key, set_name)), must_not=[_expired(time.time())])


def _metadata_conditions(filters: Mapping[str, Any]) -> list[qe.FieldCondition | qe.Filter]:
    conditions: list[qe.FieldCondition | qe.Filter] = []
    for name, expected in filters.items():
        values = expected if isinstance(expected, list) else [expected]
        alternatives = [qe.FieldCondition(key=f"metadata.{name}", match=qe.MatchValue(v)) for v in values]
        conditions.append(alternatives[0] if len(alternatives) == 1 else qe.Filter(should=list(alternatives)))
    return conditions


# BM25 (the first prefetch's score) + TIE_BREAK x cosine (the second's): see ``TIE_BREAK``.
_TIE_BROKEN = qe.Formula(
    qe.Expression.Sum(
        [
            qe.Expression.Variable("$score[0]"),
            qe.Expression.Mult([qe.Expression.Constant(TIE_BREAK), qe.Expression.Variable("$score[1]")]),
        ]
    ),
    defaults={"$score[0]": 0.0, "$score[1]": 0.0},
)


def _tie_broken(candidates: qe.Prefetch, dense: Any, depth: int) -> qe.Prefetch:
    """A lexical ranker whose candidates are scored BM25 + ``TIE_BREAK`` x cosine, in the same query."""
    # The inner dense stage rescores exactly the lexical candidates (no vector index walk), so every
    # candidate has both scores; the defaults only keep the formula total.
    cosine = qe.Prefetch(limit=depth, prefetches=[candidates], query=dense)
    return qe.Prefetch(limit=depth, prefetches=[candidates, cosine], query=_TIE_BROKEN)


def _sparse(vector: SparseVector) -> qe.SparseVector:
    return qe.SparseVector(list(vector.indices), list(vector.values))


def _items_config(dimension: int) -> qe.EdgeConfig:
    # float16 halves the dense vectors' memory, and so the cache misses of a search over a large set
    # (measured at 100k items: hybrid query 4.8 -> 3.8 ms). Cosine ranking is unchanged to ~1e-3.
    dense = qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine, datatype=qe.VectorStorageDatatype.Float16)
    # IDF is applied by the engine at query time, over what the shard holds.
    sparse = {name: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf) for name in SPARSE_NAMES}
    return qe.EdgeConfig(vectors={DENSE: dense}, sparse_vectors=sparse)


def _registry_config() -> qe.EdgeConfig:
    """A shard of records, not vectors (set definitions, the fingerprint): one constant 1-d vector each."""
    return qe.EdgeConfig(vectors={DENSE: qe.EdgeVectorParams(size=1, distance=qe.Distance.Dot)})


def _holds_data(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def _open_shard(path: Path, config: qe.EdgeConfig) -> qe.EdgeShard:
    path.mkdir(parents=True, exist_ok=True)
    with _translated(f"open of {path}"):
        if _holds_data(path):
            # A shard keeps the configuration it was created with (e.g. float32 vectors from before
            # float16 became the default): the engine refuses to load it under a different one.
            return qe.EdgeShard.load(str(path))
        return qe.EdgeShard.create(str(path), config)


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
        self._owner = StoreOwner(path)  # first: a second opener is told who holds the store, by name
        self._meta: qe.EdgeShard | None = None
        try:
            self._meta_dir = path / (meta or f"{collection}{META_SUFFIX}")
            self._meta = _open_shard(self._meta_dir, _registry_config())
            settle_fingerprint(self, fingerprint, legacy or {})
            self._open(path, collection, dimension, earlier)
        except BaseException:
            if self._meta is not None:
                self._meta.close()
            self._owner.release()
            raise

    def holds_collection(self, name: str) -> bool:
        """Whether the store's directory holds a shard of this name with data."""
        return _holds_data(self._path / name)

    def recorded_fingerprint(self) -> EmbedderFingerprint | None:
        with _translated("fingerprint read"):
            records = self._shard_meta().retrieve([FINGERPRINT_POINT], with_payload=True, with_vector=False)
        return fingerprint_from_payload(records[0].payload if records else None, str(self._meta_dir))

    def record_fingerprint(self, fingerprint: EmbedderFingerprint) -> None:
        point = qe.Point(FINGERPRINT_POINT, {DENSE: [1.0]}, fingerprint_payload(fingerprint, self._collection))
        self._update(self._shard_meta(), qe.UpdateOperation.upsert_points([point]), "fingerprint write")
        with self._write_lock, _translated("fingerprint flush"):
            self._shard_meta().flush()  # a record the next open must find, whatever happens to this process

    def _shard_meta(self) -> qe.EdgeShard:
        if self._meta is None:
            raise StoreError(f"the store at {self._path} is closed")
        return self._meta

    def _open(self, path: Path, collection: str, dimension: int, earlier: Sequence[str]) -> None:
        fresh = not (path / collection).is_dir() or not any((path / collection).iterdir())
        self._items_dir, self._sets_dir = path / collection, path / f"{collection}__sets"
        self._items = _open_shard(path / collection, _items_config(dimension))
        self._sets = _open_shard(path / f"{collection}__sets", _registry_config())
        for shard in (self._items, self._sets):
            self._index(shard)
        source = next((path / name for name in earlier if _holds_data(path / name)), None) if fresh else None
        if source is not None:
            self._migrate(source, dimension)

    def _index(self, shard: qe.EdgeShard) -> None:
        existing = shard.info().payload_schema
        with _translated("payload index creation"):
            for field in ITEM_INDEX_FIELDS:
                if field not in existing:
                    params = qe.KeywordIndexParams(is_tenant=field == "namespace")
                    shard.update(qe.UpdateOperation.create_field_index(field, params))
            for field in NUMERIC_INDEX_FIELDS:
                if field not in existing:
                    integer = field in INTEGER_INDEX_FIELDS
                    schema = qe.PayloadSchemaType.Integer if integer else qe.PayloadSchemaType.Float
                    shard.update(qe.UpdateOperation.create_field_index(field, schema))

    def _migrate(self, source: Path, dimension: int) -> None:
        """Copies a store of an earlier layout into this one, its BM25 vectors made anew from the stored texts.

        The old shards stay where they are (a backup) and are never opened again once this one holds data.
        """
        registry = source.parent / f"{source.name}__sets"
        definitions: list[dict[str, Any]] = []
        if registry.is_dir():
            old_sets = _open_shard(registry, _registry_config())
            try:
                definitions = list(self._scroll(old_sets, None))
            finally:
                old_sets.close()
        # A shard of an earlier layout loads with the configuration it was made with; this one is for an empty directory.
        old_config = qe.EdgeConfig(vectors={DENSE: qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine)})
        old_items = _open_shard(source, old_config)
        try:
            old_points: list[tuple[Any, dict[str, Any], list[float] | None]] = []
            offset: Any = None
            while True:
                request = qe.ScrollRequest(offset=offset, limit=_SCROLL_PAGE, with_payload=True, with_vector=True)
                with _translated("migration scroll"):
                    records, offset = old_items.scroll(request)
                for r in records:
                    dense = r.vector.get(DENSE) if isinstance(r.vector, dict) else None
                    if r.payload is not None:
                        vector = [float(x) for x in dense] if isinstance(dense, list) else None  # type: ignore[arg-type]  # a dense vector is a list of floats
                        old_points.append((r.id, r.payload, vector))
                if offset is None:
                    break
            batch = [
                qe.Point(
                    pid, {} if dense is None else {DENSE: dense, **{n: _sparse(v) for n, v in sparse.items()}}, payload
                )
                for pid, payload, dense, sparse in migrated_vectors(old_points, context_windows(definitions))
            ]
            for start in range(0, len(batch), _SCROLL_PAGE):
                chunk = qe.UpdateOperation.upsert_points(batch[start : start + _SCROLL_PAGE])
                self._update(self._items, chunk, "migration")
        finally:
            old_items.close()
        for payload in definitions:
            self.put_set(payload["namespace"], payload["key"], set_from_payload(payload))
        logger.warning(
            "migrated %d items from %s to the current layout at %s; the old directory is kept as a backup",
            len(batch),
            source,
            self._path,
        )

    @staticmethod
    def _sparse_for(text: str, previous: list[str]) -> dict[str, Any]:
        return {name: _sparse(v) for name, v in LEXICAL.item_vectors(text, previous).items()}

    @property
    def location(self) -> str:
        return str(self._path.resolve())

    def _update(self, shard: qe.EdgeShard, operation: qe.UpdateOperation, what: str) -> None:
        with self._write_lock, _translated(what):
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

    def _write_newer(self, points: Mapping[str, tuple[int, qe.Point]], *, deleting: bool) -> None:
        """Writes the points (point id -> its write's seq and point) over whatever is stored older (``due``).

        This process owns the shard and every write holds the lock, so reading what is stored and writing
        cannot be interleaved by another writer.
        """
        with self._write_lock, _translated("delete" if deleting else "upsert"):
            held = self._items.retrieve(list(points), with_payload=["seq", "tombstone"], with_vector=False)
            stored = {str(r.id): (int(r.payload["seq"]), bool(r.payload.get("tombstone"))) for r in held if r.payload}
            wanted = due(stored, {pid: seq for pid, (seq, _) in points.items()}, deleting=deleting)
            if wanted:
                self._items.update(qe.UpdateOperation.upsert_points([points[pid][1] for pid in wanted]))

    def _previous(self, scope: Scope, before_seq: int, count: int) -> list[str]:
        """Texts of the ``count`` items of the set just before ``before_seq``, oldest first."""
        loose = qe.FieldCondition(key="seq", range=qe.RangeFloat(lte=float(before_seq) + PREVIOUS_MARGIN))
        request = qe.ScrollRequest(
            limit=count + 64,  # the loose bound may let a few later items through; they are dropped below
            filter=qe.Filter(must=[*_scope_filter(*scope), loose], must_not=[_TOMBSTONE]),
            with_payload=True,
            order_by=qe.OrderBy("seq", direction=qe.Direction.Desc),
        )
        with _translated("scroll"):
            records, _ = self._items.scroll(request)
        return previous_texts([r.payload for r in records if r.payload is not None], before_seq, count)

    def retrieve(self, scope: Scope, item_ids: Sequence[str]) -> list[MemorySetItem]:
        ids: list[Any] = [point_id(scope, i) for i in dict.fromkeys(item_ids)]
        with _translated("retrieve"):
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
            request = qe.ScrollRequest(offset=offset, limit=_SCROLL_PAGE, filter=scroll_filter, with_payload=True)
            with _translated("scroll"):
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
    ) -> list[MemorySetItem]:
        must: list[Any] = [*_scope_filter(*scope), *_metadata_conditions(filters)]
        visible = qe.Filter(must=must, must_not=[_expired(time.time())])
        dense = qe.Query.Nearest(list(map(float, vector)), using=DENSE)
        rankers = 1
        if mode == "dense" or not text or not text.strip():
            request = qe.QueryRequest(limit=limit, query=dense, filter=visible, with_payload=True)
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
            if mode == "hybrid":
                prefetches = [
                    qe.Prefetch(limit=depth, query=dense, filter=visible),
                    *(_tie_broken(candidates, dense, depth) for candidates in prefetches),
                ]
            rankers = len(prefetches)
            request = qe.QueryRequest(
                limit=limit,
                prefetches=prefetches,
                query=qe.Fusion.Dbsf(),  # type: ignore[arg-type]  # the stubs type Fusion's variants as nested classes
                filter=visible,
                with_payload=True,
            )
        with _translated("search"):
            hits = self._items.query(request)
        # A fused score is a sum over the rankers, each scaled to about 0..1: report their mean, capped at 1.
        return [from_payload(h.payload, score=min(1.0, h.score / rankers)) for h in hits if h.payload is not None]

    def count(self, scope: Scope) -> int:
        with _translated("count"):
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
        with _translated("count"):
            items = self._items.count(
                qe.CountRequest(exact=True, filter=qe.Filter(must=[scope_filter], must_not=[_TOMBSTONE]))
            )
        sets = [f"{p['key']}:{p['set']}" for p in self._scroll(self._sets, scope_filter)]
        self._update(self._items, qe.UpdateOperation.delete_points_by_filter(scope_filter), "erasure")
        self._update(self._sets, qe.UpdateOperation.delete_points_by_filter(scope_filter), "erasure")
        return items, sets

    def delete_expired(self, now: float, limit: int) -> int:
        expired = _sweepable(now)
        with _translated("count"):
            due = self._items.count(qe.CountRequest(exact=True, filter=expired))
        if due == 0:
            return 0
        if due <= limit:
            self._update(self._items, qe.UpdateOperation.delete_points_by_filter(expired), "expiry delete")
            return due
        request = qe.ScrollRequest(limit=limit, filter=expired, with_payload=False)
        with _translated("scroll"):
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
        with _translated("set registry read"):
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
        with _translated("retrieve"):
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
                with _translated("flush"):
                    shard.flush()
                copy_tree_sparse(directory, target / directory.name, skip="*.lock")
                copied.append(str(target / directory.name))
        return copied

    def optimize(self) -> bool:
        # Writes wait while the optimizer swaps segments; reads go on. Seconds per 50k new points (DESIGN).
        with _translated("optimize"):
            return bool(self._items.optimize())

    def close(self) -> None:
        with self._write_lock:
            try:
                for shard in (self._items, self._sets, self._meta):
                    if shard is None:
                        continue
                    with _translated("close"):
                        shard.flush()
                        shard.close()
            finally:
                self._meta = None
                self._owner.release()
