"""Qdrant through ``qdrant-client``: a server or cluster in production.

The same adapter runs on qdrant-client's local mode (``":memory:"`` or a path),
which is how the contract tests exercise this code without a server. One
collection per embedding model holds the items of every tenant, partitioned by
the ``namespace`` payload field (indexed with ``is_tenant``); a second
collection holds set definitions.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm

from memory_core.core.errors import StoreError, TransientStoreError
from memory_core.core.messages import BrowseQuery, Explained
from memory_core.core.models import MemorySet, MemorySetItem, Scope, SearchMode
from memory_core.core.settings import redact_url
from memory_core.engine.embedders.base import EmbedderFingerprint
from memory_core.engine.stores import qdrant_collections
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
    chunks,
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
from memory_core.engine.stores.fingerprints import (
    FINGERPRINT_RECORD,
    META_SUFFIX,
    fingerprint_from_payload,
    fingerprint_payload,
    record_point,
    settle_fingerprint,
)
from memory_core.engine.stores.migration import layout_source, migrate_layout
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
from memory_core.engine.stores.qdrant_collections import SCROLL_PAGE, EarlierCollection, translated
from memory_core.engine.stores.qdrant_filters import (
    OWED,
    TOMBSTONE,
    bound,
    browse_filters,
    expired,
    scope_conditions,
    searched,
    sweepable,
    unchanged_since,
    visible_in,
)

logger = logging.getLogger(__name__)

DENSE = qdrant_collections.DENSE
_CAS_ROUNDS = 8


def _to_qdrant(vector: SparseVector) -> qm.SparseVector:
    return qm.SparseVector(indices=list(vector.indices), values=list(vector.values))


def _sparse_for(text: str, previous: list[str]) -> dict[str, qm.SparseVector]:
    return {name: _to_qdrant(v) for name, v in LEXICAL.item_vectors(text, previous).items()}


class QdrantVectorStore:
    """Items and set definitions in two collections of a Qdrant server (or local mode)."""

    def __init__(
        self,
        client: QdrantClient,
        *,
        collection: str,
        dimension: int,
        location: str,
        earlier: Sequence[str] = (),
        tombstone_ttl: float = TOMBSTONE_TTL,
        meta: str | None = None,
        fingerprint: EmbedderFingerprint | None = None,
        legacy: Mapping[str, Callable[[], EmbedderFingerprint]] | None = None,
        sibling: bool = False,
    ) -> None:
        """``earlier``: the collections of earlier layouts, newest first; a new store is filled from the first found.

        ``meta``: the collection of the store's fingerprint (default ``<collection>__meta``). ``fingerprint``:
        the embedder's; a store that records another refuses to open (``settle_fingerprint``, which ``legacy``
        is for). Checked before the items collection is created. ``sibling``: a second items collection of an
        open store (``open_sibling``): no fingerprint check, and closing it leaves the client open.
        """
        self._client = client
        self._owns_client = not sibling
        self._tombstone_ttl = tombstone_ttl
        self._items = collection
        self._meta = meta or f"{collection}{META_SUFFIX}"
        self._location = location
        with translated("collection setup"):
            if not self._client.collection_exists(self._meta):
                self._client.create_collection(
                    self._meta, vectors_config={DENSE: qm.VectorParams(size=1, distance=qm.Distance.DOT)}
                )
        if not sibling:
            # A reindexed store's items may live in a collection other than the model's default name.
            self._items = settle_fingerprint(self, fingerprint, legacy or {}) or collection
        self._sets = f"{self._items}__sets"
        with translated("collection setup"):
            fresh = not self._client.collection_exists(self._items)
        # Decided (and recorded) before the collections are created: a kill right after still resumes the migration.
        source = layout_source(self, self._items, earlier, fresh=fresh) if earlier else None
        with translated("collection setup"):
            self._ensure(self._items, dimension, sparse=True)
            self._ensure(self._sets, 1, sparse=False)
        if source is not None:
            self._migrate(source)

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        api_key: str | None,
        timeout: float,
        collection: str,
        dimension: int,
        earlier: Sequence[str] = (),
        tombstone_ttl: float = TOMBSTONE_TTL,
        meta: str | None = None,
        fingerprint: EmbedderFingerprint | None = None,
        legacy: Mapping[str, Callable[[], EmbedderFingerprint]] | None = None,
    ) -> QdrantVectorStore:
        """Opens a server (``http(s)://...``) or local mode (``":memory:"`` or a directory path)."""
        if url.startswith(("http://", "https://")):
            # qdrant-client takes whole seconds: round up, so 0.5 s does not become no time at all.
            client = QdrantClient(url=url, api_key=api_key, timeout=math.ceil(timeout))
        else:
            client = QdrantClient(location=url) if url == ":memory:" else QdrantClient(path=url)
        try:
            return cls(
                client,
                collection=collection,
                dimension=dimension,
                location=redact_url(url),
                earlier=earlier,
                tombstone_ttl=tombstone_ttl,
                meta=meta,
                fingerprint=fingerprint,
                legacy=legacy,
            )
        except BaseException:
            client.close()  # local mode holds its directory's lock until closed; a refused open leaves it free
            raise

    def holds_collection(self, name: str) -> bool:
        """Whether the server (or local mode) has a collection of this name."""
        with translated("collection lookup"):
            return bool(self._client.collection_exists(name))

    def filled_collections(self) -> list[str]:
        """The collections of this store's prefix, but its metadata, that hold a point (``settle_fingerprint``);
        not those of a store whose prefix extends this one's (``memory_test`` beside ``memory``)."""
        prefix = self._meta.removesuffix(META_SUFFIX)
        with translated("collection listing"):
            names = sorted(c.name for c in self._client.get_collections().collections)
            candidates = [n for n in names if n.startswith(f"{prefix}_") and n != self._meta]
            others = [n.removesuffix(META_SUFFIX) for n in candidates if n.endswith(META_SUFFIX)]
            ours = [n for n in candidates if not any(n.startswith(f"{other}_") for other in others)]
            return [n for n in ours if self._client.scroll(n, limit=1, with_payload=False, with_vectors=False)[0]]

    def recorded_fingerprint(self) -> EmbedderFingerprint | None:
        return fingerprint_from_payload(self.read_record(FINGERPRINT_RECORD), f"collection {self._meta}")

    def record_fingerprint(self, fingerprint: EmbedderFingerprint) -> None:
        self.write_record(FINGERPRINT_RECORD, fingerprint_payload(fingerprint, self._items))

    @property
    def collection(self) -> str:
        return self._items

    def read_record(self, name: str) -> dict[str, Any] | None:
        with translated("record read"):
            records = self._client.retrieve(self._meta, ids=[record_point(name)], with_payload=True, with_vectors=False)
        return dict(records[0].payload) if records and records[0].payload else None

    def write_record(self, name: str, payload: Mapping[str, Any]) -> None:
        point = qm.PointStruct(id=record_point(name), vector={DENSE: [1.0]}, payload=dict(payload))
        with translated("record write"):
            self._client.upsert(self._meta, points=[point], wait=True)

    def open_sibling(self, collection: str, dimension: int) -> QdrantVectorStore:
        if collection == self._items:
            raise StoreError(f"collection {collection!r} is the one this store has open")
        return QdrantVectorStore(
            self._client,
            collection=collection,
            dimension=dimension,
            location=self._location,
            tombstone_ttl=self._tombstone_ttl,
            meta=self._meta,
            sibling=True,
        )

    def drop_collection(self, collection: str) -> bool:
        if collection == self._items:
            raise StoreError(f"collection {collection!r} is the one this store has open; it cannot be dropped")
        found = False
        with translated("collection drop"):
            for name in (collection, f"{collection}__sets"):
                if self._client.collection_exists(name):
                    self._client.delete_collection(name)
                    found = True
        return found

    def scan(self, start: str, stop: str | None, limit: int) -> tuple[list[RawPoint], str | None]:
        with translated("scan"):
            records, offset = self._client.scroll(
                self._items, offset=start, limit=limit, with_payload=True, with_vectors=list(SPARSE_NAMES)
            )
        return scanned_page(((r.id, r.payload, r.vector) for r in records), offset, stop)

    def versions(self, ids: Sequence[str]) -> dict[str, tuple[int, bool]]:
        with translated("retrieve"):
            held = self._client.retrieve(
                self._items, ids=list(ids), with_payload=["seq", "tombstone"], with_vectors=False
            )
        return {str(r.id): (int(r.payload["seq"]), bool(r.payload.get("tombstone"))) for r in held if r.payload}

    def copy_in(self, points: Sequence[tuple[RawPoint, Sequence[float] | None]]) -> int:
        written = 0
        for deleting, batch in copies_by_kind(points):
            structs = {
                point.id: qm.PointStruct(
                    id=point.id,
                    vector={}
                    if dense is None
                    else {DENSE: list(map(float, dense)), **{n: _to_qdrant(v) for n, v in point.sparse.items()}},
                    payload=point.payload,
                )
                for point, dense in batch
            }
            written += self._write_newer(
                {p.id: (int(p.payload["seq"]), structs[p.id]) for p, _ in batch}, deleting=deleting
            )
        return written

    def point_count(self) -> int:
        with translated("count"):
            return int(self._client.count(self._items, exact=True).count)

    def raw_points(self, ids: Sequence[str]) -> dict[str, RawPoint]:
        if not ids:
            return {}
        with translated("retrieve"):
            records = self._client.retrieve(
                self._items, ids=list(ids), with_payload=True, with_vectors=list(SPARSE_NAMES)
            )
        points, _ = scanned_page(((r.id, r.payload, r.vector) for r in records), None, None)
        return {point.id: point for point in points}

    def owe(self, scope: Scope, versions: Mapping[str, int]) -> None:
        placeholders = {
            point_id(scope, item_id): (
                seq - 1,
                qm.PointStruct(id=point_id(scope, item_id), vector={}, payload=owed_payload(scope, item_id, seq)),
            )
            for item_id, seq in versions.items()
        }
        if placeholders:
            self._write_newer(placeholders, deleting=False)

    def owed(self, limit: int) -> list[str]:
        with translated("scroll"):
            records, _ = self._client.scroll(self._items, scroll_filter=OWED, limit=limit, with_payload=False)
        return [str(r.id) for r in records]

    def owed_count(self) -> int:
        with translated("count"):
            return int(self._client.count(self._items, count_filter=OWED, exact=True).count)

    def remove_unchanged(self, held: Mapping[str, int]) -> int:
        if not held:
            return 0
        # One filtered delete: the server checks each point's seq and deletes it at once (a compare-and-delete).
        unchanged = unchanged_since(held)
        with translated("delete"):
            before = self._client.count(self._items, count_filter=unchanged, exact=True).count
            self._client.delete(self._items, points_selector=qm.FilterSelector(filter=unchanged), wait=True)
        return int(before)

    def _ensure(self, name: str, dimension: int, *, sparse: bool) -> None:
        if not self._client.collection_exists(name):
            distance = qm.Distance.COSINE if dimension > 1 else qm.Distance.DOT
            self._client.create_collection(
                name,
                # float16, as in the embedded engine: half the memory, the same ranking to ~1e-3.
                vectors_config={
                    DENSE: qm.VectorParams(size=dimension, distance=distance, datatype=qm.Datatype.FLOAT16)
                },
                # IDF is applied by the server at query time, over the collection.
                sparse_vectors_config={n: qm.SparseVectorParams(modifier=qm.Modifier.IDF) for n in SPARSE_NAMES}
                if sparse
                else None,
            )
        for field in ITEM_INDEX_FIELDS:
            self._client.create_payload_index(
                name,
                field_name=field,
                field_schema=qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, is_tenant=field == "namespace"),
            )
        for field in NUMERIC_INDEX_FIELDS:
            integer = field in INTEGER_INDEX_FIELDS
            schema = qm.PayloadSchemaType.INTEGER if integer else qm.PayloadSchemaType.FLOAT
            self._client.create_payload_index(name, field_name=field, field_schema=schema)
        words = qm.TextIndexParams(type=qm.TextIndexType.TEXT, tokenizer=qm.TokenizerType.WORD, lowercase=True)
        for field in TEXT_INDEX_FIELDS:  # a browse's ``contains``
            self._client.create_payload_index(name, field_name=field, field_schema=words)

    def _migrate(self, source: str) -> None:
        """Fills this store from a collection of an earlier layout (``stores.migration``), or finishes doing so.

        The old collections are left as they are (a backup); drop them once the new ones are checked.
        """
        definitions: list[dict[str, Any]] = []
        offset: qm.ExtendedPointId | None = None
        with translated("migration scroll"):
            while self._client.collection_exists(f"{source}__sets"):
                records, offset = self._client.scroll(
                    f"{source}__sets", limit=SCROLL_PAGE, offset=offset, with_payload=True
                )
                definitions.extend(dict(r.payload) for r in records if r.payload)
                if offset is None:
                    break
        total = migrate_layout(EarlierCollection(self._client, source), self, self._items, definitions)
        logger.warning("migrated %d items from collection %s to the current layout %s", total, source, self._items)

    @property
    def location(self) -> str:
        return self._location

    def upsert(self, scope: Scope, records: Sequence[ItemRecord], *, context_window: int = 0) -> None:
        records = newest_records(records)
        if not records:
            return
        before = self._previous(scope, min(r.seq for r in records), context_window) if context_window else []
        points = {
            point_id(scope, r.item.id): (
                r.seq,
                qm.PointStruct(
                    id=point_id(scope, r.item.id),
                    vector={DENSE: list(map(float, r.vector)), **_sparse_for(str(r.item.value), previous)},
                    payload=to_payload(scope, r),
                ),
            )
            for r, previous in with_context(records, before, context_window)
        }
        self._write_newer(points, deleting=False)

    def _write_newer(self, points: Mapping[str, tuple[int, qm.PointStruct]], *, deleting: bool) -> int:
        """Writes the points (point id -> its write's seq and point) over whatever is stored older (``due``).

        Other workers may write the same points, so each write is a compare-and-set on the ``seq`` read
        just before it; a point another worker changed in between is read and decided again.
        """
        pending = dict(points)
        written: set[str] = set()
        for _ in range(_CAS_ROUNDS):
            if not pending:
                return len(written)
            with translated("delete" if deleting else "upsert"):
                held = self._client.retrieve(
                    self._items, ids=list(pending), with_payload=["seq", "tombstone"], with_vectors=False
                )
            stored = {str(r.id): (int(r.payload["seq"]), bool(r.payload.get("tombstone"))) for r in held if r.payload}
            wanted = due(stored, {pid: seq for pid, (seq, _) in pending.items()}, deleting=deleting)
            for part in chunks({pid: pending[pid][0] for pid in wanted}):
                read = {pid: stored[pid][0] for pid in part if pid in stored}
                with translated("delete" if deleting else "upsert"):
                    self._client.upsert(
                        self._items,
                        points=[pending[pid][1] for pid in part],
                        update_filter=unchanged_since(read),
                        wait=True,
                    )
            # What was written now holds exactly its seq, so the next read finds nothing due for it; what
            # another worker changed in between is decided again against its new state.
            written.update(wanted)
            pending = {pid: pending[pid] for pid in wanted}
        raise TransientStoreError(f"{len(pending)} points kept changing under {_CAS_ROUNDS} compare-and-set rounds")

    def _previous(self, scope: Scope, before_seq: int, count: int) -> list[str]:
        """Texts of the ``count`` items of the set just before ``before_seq``, oldest first."""
        loose = qm.FieldCondition(key="seq", range=qm.Range(lte=float(before_seq) + PREVIOUS_MARGIN))
        with translated("scroll"):
            records, _ = self._client.scroll(
                self._items,
                scroll_filter=qm.Filter(must=[*scope_conditions(*scope), loose], must_not=[TOMBSTONE]),
                limit=count + 64,  # the loose bound may let a few later items through; they are dropped below
                with_payload=True,
                order_by=qm.OrderBy(key="seq", direction=qm.Direction.DESC),
            )
        return previous_texts([r.payload for r in records if r.payload], before_seq, count)

    def retrieve(self, scope: Scope, item_ids: Sequence[str]) -> list[MemorySetItem]:
        ids: list[qm.ExtendedPointId] = [point_id(scope, i) for i in dict.fromkeys(item_ids)]
        with translated("retrieve"):
            records = self._client.retrieve(self._items, ids=ids, with_payload=True, with_vectors=False)
        now = time.time()
        pairs = [
            (r.payload["seq"], from_payload(r.payload))
            for r in records
            if r.payload and in_scope(r.payload, scope) and is_visible(r.payload, now)
        ]
        return sort_by_seq(pairs)

    def _scroll(self, scroll_filter: qm.Filter, limit: int | None = None) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        offset: qm.ExtendedPointId | None = None
        while limit is None or len(found) < limit:
            with translated("scroll"):
                records, offset = self._client.scroll(
                    self._items, scroll_filter=scroll_filter, limit=SCROLL_PAGE, offset=offset, with_payload=True
                )
            found.extend(r.payload for r in records if r.payload)
            if offset is None:
                break
        return found if limit is None else found[:limit]

    def set_fields(
        self, scope: Scope, item_ids: Sequence[str], fields: Mapping[str, Any], *, seq: int | None = None
    ) -> None:
        if not item_ids:
            return
        wanted: list[qm.ExtendedPointId] = [point_id(scope, i) for i in dict.fromkeys(item_ids)]
        must: list[qm.Condition] = [qm.HasIdCondition(has_id=wanted)]
        if seq is not None:
            must.append(qm.FieldCondition(key="seq", match=qm.MatchValue(value=seq)))  # integer match: exact
        only_live = qm.FilterSelector(filter=qm.Filter(must=must, must_not=[TOMBSTONE]))
        with translated("payload update"):
            self._client.set_payload(self._items, payload=dict(fields), points=only_live, wait=True)

    def find_by_text_hash(self, scope: Scope, hashes: Sequence[str]) -> dict[str, MemorySetItem]:
        if not hashes:
            return {}
        hash_filter = qm.Filter(
            must=[*scope_conditions(*scope), qm.FieldCondition(key="text_hash", match=qm.MatchAny(any=list(hashes)))],
            must_not=[expired(time.time())],
        )
        return oldest_by_hash(self._scroll(hash_filter))

    def expired(self, now: float, limit: int) -> list[tuple[Scope, str]]:
        items_only = qm.Filter(must=[expired(now)], must_not=[TOMBSTONE])
        return [(Scope(p["namespace"], p["key"], p["set"]), p["item_id"]) for p in self._scroll(items_only, limit)]

    def list_items(self, scope: Scope) -> list[MemorySetItem]:
        scroll_filter = visible_in(*scope)
        pairs: list[tuple[int, MemorySetItem]] = []
        offset: qm.ExtendedPointId | None = None
        while True:
            with translated("scroll"):
                records, offset = self._client.scroll(
                    self._items, scroll_filter=scroll_filter, limit=SCROLL_PAGE, offset=offset, with_payload=True
                )
            pairs.extend((r.payload["seq"], from_payload(r.payload)) for r in records if r.payload)
            if offset is None:
                return sort_by_seq(pairs)

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
        query_filter = searched(scope, filters, include_superseded)
        dense = list(map(float, vector))
        rankers = 1
        with translated("search"):
            if mode == "dense" or not text or not text.strip():
                response = self._client.query_points(
                    self._items, query=dense, using=DENSE, query_filter=query_filter, limit=limit, with_payload=True
                )
            elif mode == "hybrid":
                return self._hybrid(dense, _to_qdrant(LEXICAL.query(text)), query_filter, limit)
            else:
                words = _to_qdrant(LEXICAL.query(text))
                depth = max(PREFETCH, limit)
                prefetch = [
                    qm.Prefetch(
                        query=words, using=name, filter=query_filter, limit=depth, score_threshold=LEXICAL_FLOOR
                    )
                    for name in SPARSE_NAMES
                ]
                rankers = len(prefetch)
                response = self._client.query_points(
                    self._items,
                    prefetch=prefetch,
                    query=qm.FusionQuery(fusion=qm.Fusion.DBSF),
                    query_filter=query_filter,
                    limit=limit,
                    with_payload=True,
                )
        # A fused score is a sum over the rankers, each scaled to about 0..1: report their mean, capped at 1.
        return [
            from_payload(p.payload, score=min(1.0, p.score / rankers)) for p in response.points if p.payload is not None
        ]

    def _hybrid(
        self, dense: list[float], words: qm.SparseVector, visible: qm.Filter, limit: int
    ) -> list[MemorySetItem]:
        """Each ranker's candidates in one batch (each lexical ranker evaluated once), their cosines, then the
        fused best with their payloads: ``fused_hybrid``. Three round trips where the one fused query was
        one, each lexical ranker's posting lists scanned once instead of twice."""
        dense_ranking, lexical, cosines = self._rankings(dense, words, visible, limit)
        best = fused_hybrid(dense_ranking, lexical, cosines, limit)
        return fused_items(best, self._payloads([point for point, _ in best]))

    def _rankings(
        self, dense: list[float], words: qm.SparseVector, visible: qm.Filter, limit: int, *, lexical_only: bool = False
    ) -> tuple[list[tuple[str, float]], list[list[tuple[str, float]]], dict[str, float]]:
        """The dense and lexical rankings of a hybrid search (by point id) and the lexical candidates' cosines.
        ``lexical_only``: the lexical rankings alone."""
        depth = max(PREFETCH, limit)
        rankers = [] if lexical_only else [qm.QueryRequest(query=dense, using=DENSE, filter=visible, limit=depth)]
        rankers += [
            qm.QueryRequest(query=words, using=name, filter=visible, limit=depth, score_threshold=LEXICAL_FLOOR)
            for name in SPARSE_NAMES
        ]
        with translated("search"):
            hits = self._client.query_batch_points(self._items, requests=rankers)
            rankings = [[(str(hit.id), hit.score) for hit in ranker.points] for ranker in hits]
            dense_ranking, lexical = ([], rankings) if lexical_only else (rankings[0], rankings[1:])
            candidates: list[Any] = list({point for ranking in lexical for point, _ in ranking})
            cosines: dict[str, float] = {}
            if candidates and not lexical_only:
                # Exact: the filter holds at most ``depth`` ids a lexical ranker, so no index walk.
                rescored = self._client.query_points(
                    self._items,
                    query=dense,
                    using=DENSE,
                    query_filter=qm.Filter(must=[qm.HasIdCondition(has_id=candidates)]),
                    limit=len(candidates),
                )
                cosines = {str(hit.id): hit.score for hit in rescored.points}
        return dense_ranking, lexical, cosines

    def _payloads(self, points: Sequence[Any]) -> dict[str, dict[str, Any] | None]:
        with translated("retrieve"):
            records = self._client.retrieve(self._items, ids=list(points), with_payload=True)
        return {str(record.id): record.payload for record in records}

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
        words = _to_qdrant(LEXICAL.query(text))
        hybrid = mode == "hybrid"
        dense_ranking, lexical, cosines = self._rankings(
            list(map(float, vector)), words, visible, limit, lexical_only=not hybrid
        )
        best = hybrid_parts(dense_ranking, lexical, cosines, limit) if hybrid else lexical_parts(lexical, limit)
        return explained(best, self._payloads([point for point, _ in best]))

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

    def _ordered(self, browse: qm.Filter) -> Scroll:
        def scroll(
            bounds: Sequence[Bound], order: str, descending: bool, start: int | None, count: int
        ) -> list[Payload]:
            with translated("browse"):
                records, _ = self._client.scroll(
                    self._items,
                    scroll_filter=qm.Filter(must=[browse, *map(bound, bounds)]),
                    limit=count,
                    with_payload=True,
                    order_by=qm.OrderBy(
                        key=order, direction=qm.Direction.DESC if descending else qm.Direction.ASC, start_from=start
                    ),
                )
            return [record.payload for record in records if record.payload is not None]

        return scroll

    def count_matching(self, scope: Scope, query: BrowseQuery) -> int:
        with translated("count"):
            return sum(
                self._client.count(self._items, count_filter=browse, exact=True).count
                for browse in browse_filters(*scope, query, time.time())
            )

    def count(self, scope: Scope) -> int:
        with translated("count"):
            return self._client.count(self._items, count_filter=visible_in(*scope), exact=True).count

    def forget(self, namespace: str, key: str | None) -> tuple[int, list[str]]:
        fields = [("namespace", namespace)] + ([("key", key)] if key is not None else [])
        scope_filter = qm.Filter(must=[qm.FieldCondition(key=f, match=qm.MatchValue(value=v)) for f, v in fields])
        with translated("erasure"):
            stored = qm.Filter(must=[scope_filter], must_not=[TOMBSTONE])
            items = self._client.count(self._items, count_filter=stored, exact=True).count
            records, _ = self._client.scroll(self._sets, scroll_filter=scope_filter, limit=100_000, with_payload=True)
            sets = [f"{r.payload['key']}:{r.payload['set']}" for r in records if r.payload]
            for collection in (self._items, self._sets):
                self._client.delete(collection, points_selector=qm.FilterSelector(filter=scope_filter), wait=True)
        return items, sets

    def delete_expired(self, now: float, limit: int) -> int:
        expired = sweepable(now)
        with translated("expiry delete"):
            due = self._client.count(self._items, count_filter=expired, exact=True).count
            if due == 0:
                return 0
            if due <= limit:
                self._client.delete(self._items, points_selector=qm.FilterSelector(filter=expired), wait=True)
                return due
            records, _ = self._client.scroll(self._items, scroll_filter=expired, limit=limit, with_payload=False)
            ids: list[qm.ExtendedPointId] = [r.id for r in records]
            self._client.delete(self._items, points_selector=qm.PointIdsList(points=ids), wait=True)
            return len(ids)

    def delete(self, scope: Scope, versions: Mapping[str, int]) -> None:
        keep_until = time.time() + self._tombstone_ttl
        tombstones = {
            point_id(scope, item_id): (
                seq,
                qm.PointStruct(
                    id=point_id(scope, item_id), vector={}, payload=tombstone_payload(scope, item_id, seq, keep_until)
                ),
            )
            for item_id, seq in versions.items()
        }
        if tombstones:
            self._write_newer(tombstones, deleting=True)

    def item_versions(self, scope: Scope) -> dict[str, int]:
        stored = qm.Filter(must=scope_conditions(*scope), must_not=[TOMBSTONE])
        return {p["item_id"]: p["seq"] for p in self._scroll(stored)}

    def put_set(self, namespace: str, key: str, definition: MemorySet) -> None:
        point = qm.PointStruct(
            id=set_point_id(namespace, key, definition.name),
            vector={DENSE: [1.0]},
            payload=set_to_payload(namespace, key, definition),
        )
        with translated("set registry write"):
            self._client.upsert(self._sets, points=[point], wait=True)

    def get_set(self, namespace: str, key: str, set_name: str) -> MemorySet | None:
        with translated("set registry read"):
            records = self._client.retrieve(
                self._sets, ids=[set_point_id(namespace, key, set_name)], with_payload=True, with_vectors=False
            )
        return set_from_payload(records[0].payload) if records and records[0].payload else None

    def delete_set(self, namespace: str, key: str, set_name: str) -> bool:
        existed = self.get_set(namespace, key, set_name) is not None
        selector = qm.PointIdsList(points=[set_point_id(namespace, key, set_name)])
        with translated("set registry delete"):
            self._client.delete(self._sets, points_selector=selector, wait=True)
        return existed

    def list_sets(self, limit: int) -> list[tuple[str, str, MemorySet]]:
        found: list[tuple[str, str, MemorySet]] = []
        offset: qm.ExtendedPointId | None = None
        while len(found) < limit:
            with translated("set registry scroll"):
                records, offset = self._client.scroll(self._sets, limit=SCROLL_PAGE, offset=offset, with_payload=True)
            found.extend(
                (r.payload["namespace"], r.payload["key"], set_from_payload(r.payload)) for r in records if r.payload
            )
            if offset is None:
                break
        return found[:limit]

    def sets_of(self, namespace: str, key: str) -> list[MemorySet]:
        found: list[MemorySet] = []
        offset: qm.ExtendedPointId | None = None
        scope_filter = qm.Filter(must=scope_conditions(namespace, key))
        while True:
            with translated("set registry scroll"):
                records, offset = self._client.scroll(
                    self._sets, scroll_filter=scope_filter, limit=SCROLL_PAGE, offset=offset, with_payload=True
                )
            found.extend(set_from_payload(r.payload) for r in records if r.payload)
            if offset is None:
                return sorted(found, key=lambda d: d.name)

    def namespace_counts(self, limit: int) -> dict[str, int]:
        with translated("facet"):
            response = self._client.facet(self._items, key="namespace", limit=limit, exact=True)
        return {str(hit.value): int(hit.count) for hit in response.hits}

    def item_vectors(self, scope: Scope, item_ids: Sequence[str]) -> dict[str, list[float]]:
        ids: list[qm.ExtendedPointId] = [point_id(scope, i) for i in dict.fromkeys(item_ids)]
        with translated("retrieve"):
            records = self._client.retrieve(self._items, ids=ids, with_payload=True, with_vectors=[DENSE])
        found: dict[str, list[float]] = {}
        for r in records:
            dense = r.vector.get(DENSE) if isinstance(r.vector, dict) else None
            if r.payload and in_scope(r.payload, scope) and isinstance(dense, list):
                found[str(r.payload["item_id"])] = [float(x) for x in dense]  # type: ignore[arg-type]  # dense: floats
        return found

    def snapshot(self, target: Path) -> list[str]:
        # The server writes the snapshots into its own storage (GET /collections/{name}/snapshots lists them);
        # restore them with its recover API (memory-core restore --snapshot).
        made = []
        with translated("snapshot"):
            for collection in (self._items, self._sets, self._meta):
                description = self._client.create_snapshot(collection, wait=True)
                if description is None:
                    raise TransientStoreError(f"Qdrant made no snapshot of {collection}")
                made.append(f"{collection}/{description.name}")
        return made

    def optimize(self) -> bool:
        return False  # a server's optimizers run in the background; local mode has no index to build

    def close(self) -> None:
        if not self._owns_client:  # a sibling shares its parent's client
            return
        with translated("close"):
            self._client.close()
