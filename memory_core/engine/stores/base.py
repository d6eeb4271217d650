"""The vector store seam: a Protocol every adapter implements, and the payload codec they share.

Invariants every adapter keeps (the contract tests in ``tests/integration/stores``
check them on each):

* Every call takes a ``Scope`` (or namespace and key) and filters on
  ``namespace``, ``key`` and ``set`` itself; no call can see another scope.
* Point ids are ``uuid5(namespace, key, set, item id)``, so writing the same item
  twice overwrites one point (idempotent upserts).
* Writes are monotonic in ``seq`` (the client assigns it when it accepts a write): an upsert replaces a
  stored item only when the stored one is older, and a delete replaces each item by a *tombstone* at the
  delete's ``seq``, so a replayed or late write (a redelivered task) never brings back an older value
  nor a deleted item. A tombstone is a point with no vectors that every read skips (it looks expired);
  the TTL sweep removes it ``tombstone_ttl`` seconds after the delete, which must outlast the longest
  redelivery. ``seq`` is compared exactly, in Python (``due``): the engines compare a range bound on an
  integer field through a float, which cannot hold a nanosecond ``seq`` (~1.8e18). An adapter whose
  store other processes write too (a server) makes the write a compare-and-set on the ``seq`` it read
  and reads again until what it holds is at least as new, so racing workers cannot undo each other.
* ``list_items`` and ``retrieve`` return insertion order (``seq`` ascending), superseded facts included;
  ``search`` leaves those out unless asked (``include_superseded``).
* ``search`` scores are higher = more relevant. In ``dense`` mode they are cosine similarities;
  in ``lexical`` and ``hybrid`` mode they are fused scores (DBSF: each ranker's scores scaled to 0..1 by
  their mean +/- 3 standard deviations, then averaged over the rankers and capped at 1: a ranker's
  outlier can exceed its +3 sigma), so also within 0..1 but comparable within one result only.
  In ``hybrid`` mode the lexical rankers break BM25 near-ties by cosine similarity (``TIE_BREAK``).
* Every item is indexed three ways: its dense vector, a BM25 sparse vector of its text (``bm25``,
  IDF applied by the engine) and a BM25 sparse vector of its text with the set's previous
  ``context_window`` items (``bm25_ctx``), so a turn is found by the words of the turns that led to it.
* Set definitions are stored durably beside the items (a second collection).
* The store records the fingerprint of the embedder that filled it (``fingerprints``), so vectors of
  two models never meet in it.
"""

from __future__ import annotations

import hashlib
import math
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from memory_core.core.errors import MemorySetNotFound
from memory_core.core.messages import BrowseQuery, Explained
from memory_core.core.models import DatetimeRange, FactInfo, MemorySet, MemorySetItem, Scope, SearchMode
from memory_core.engine.embedders.base import EmbedderFingerprint
from memory_core.engine.stores import lexical

# The BM25 model lives in ``lexical``; its names stay importable from here, where the stores have always found them.
SPARSE_TEXT, SPARSE_CONTEXT, SPARSE_NAMES = lexical.SPARSE_TEXT, lexical.SPARSE_CONTEXT, lexical.SPARSE_NAMES
BM25_AVG_LEN, BM25_B, CONTEXT_WORDS = lexical.BM25_AVG_LEN, lexical.BM25_B, lexical.CONTEXT_WORDS
LEXICAL = lexical.LEXICAL
Lexical = lexical.Lexical
SparseVector = lexical.SparseVector

# Fixed forever: changing it would orphan every stored point.
_POINT_NAMESPACE = uuid.UUID("6f1b7e1c-3f51-4f7e-9d39-4a7d0f3c2b10")

ITEM_INDEX_FIELDS = ("namespace", "key", "set", "item_id", "text_hash", "compacted_from")
"""Keyword payload fields every adapter indexes (``namespace`` as the tenant field; ``compacted_from`` so a browse
tells summaries from the rest by whether it is empty, from the index)."""
NUMERIC_INDEX_FIELDS = (
    "created_start",
    "expires_at",
    "last_accessed_time",
    "importance",
    "pinned",
    "seq",
    "tombstone",
    "keep_until",
    "owed",
    "superseded",
)
"""Numeric payload fields indexed for creation time, expiry, LRU, importance, insertion order (a browse orders by
these five), tombstones, a reindex's owed copies and superseded facts (0/1 flags). A store opened over a collection
made before a field was added gets its index then; points written before it lack the field, which a ``must_not``
on ``field == 1`` lets through."""
INTEGER_INDEX_FIELDS = frozenset({"pinned", "seq", "tombstone", "owed", "superseded"})

TOMBSTONE_TTL = 7 * 24 * 3600.0
"""How long a tombstone outlives its delete by default (``MEMORY_QDRANT__TOMBSTONE_TTL``)."""
CONDITIONAL_BATCH = 256
"""Points per compare-and-set write on a server: it checks each existing point against one clause per
point of the call (``seq`` equal to what was read, by id), so the check grows with the square of the batch."""

LEXICAL_FLOOR = 0.5
"""The BM25 score (IDF-weighted) a lexical candidate needs to take part in a search. Scores sum the IDF of
the matched words, so this keeps out items that match only words most items share ("Alice" in every fact
about Alice): DBSF rescales each ranker by its own spread, which would otherwise turn that non-evidence
into a full vote. Measured: no change on locomo-dev at 0.5 or 1.0. It cannot help when the shared word is
rare in the collection as a whole (IDF is collection-wide); ``TIE_BREAK`` handles that case in hybrid search."""
TIE_BREAK = 2.0
"""In ``hybrid`` search each lexical ranker scores its candidates by BM25 + ``TIE_BREAK`` x their cosine
similarity to the query, computed in the same store query. Items that match only a word they all share
("Alice" in every fact about Alice) nearly tie on BM25, apart by their lengths, and DBSF rescales a ranker
by its own spread, so without this that near-tie became a full vote for whichever item was shortest. Now
the tie goes to the item closest in meaning, while a real lexical difference (a matched rare word adds
its IDF, several points) still outweighs a cosine gap. ``lexical`` mode stays pure BM25.
It was 1 while BM25 normalized lengths to 256 words; at ``BM25_AVG_LEN`` a word's weight falls ~1% per
extra word of a short item, so 2 keeps a 0.1 cosine gap ahead of a few words of length. Measured in a
scratch replica of hybrid search (within 0.003 of ``ops/eval``): 1, 1.5 and 2 rank alike on both dev sets
(LoCoMo MRR 0.541-0.543, LongMemEval 0.730-0.733);
3 starts to lose (LongMemEval R@5 0.799 -> 0.788)."""
PREFETCH = 50
"""Candidates each ranker contributes to a fused search (measured: 20, 50 and 100 rank alike)."""


def item_text(value: object) -> str:
    """The text an item is indexed by: the value, or ``"role: content"`` for a chat message."""
    return str(value) if not isinstance(value, dict) else f"{value.get('role', 'user')}: {value.get('content', '')}"


def with_context(
    records: Sequence[ItemRecord], before: Sequence[str], window: int
) -> list[tuple[ItemRecord, list[str]]]:
    """Each record (in ``seq`` order) with the texts of the ``window`` items before it.

    ``before`` are the texts of the set's items preceding the first record, oldest first; later records
    take their context from the records before them in the same batch.
    """
    ordered = sorted(records, key=lambda r: r.seq)
    history = list(before)
    paired = []
    for record in ordered:
        paired.append((record, history[-window:] if window else []))
        history.append(str(record.item.value))  # a ChatMessage reads "role: content", as item_text gives
    return paired


PREVIOUS_MARGIN = 4096
"""Nanoseconds added to a ``seq < x`` range filter: seq values (~1.7e18) are beyond float precision, so
adapters filter loosely on the engine and exactly in Python (qdrant-edge 0.9.0's ``order_by`` with
``start_from`` applies the limit before the start, so it cannot be used for this)."""


def previous_texts(payloads: Sequence[Mapping[str, Any]], before_seq: int, count: int) -> list[str]:
    """Texts of the ``count`` payloads just before ``before_seq``, oldest first (exact integer comparison)."""
    earlier = sorted((p for p in payloads if p["seq"] < before_seq), key=lambda p: p["seq"])
    return [item_text(p["value"]) for p in earlier[-count:]] if count else []


def text_hash(value: object) -> str:
    """The hash exact dedup compares: the text lower-cased with runs of white space folded."""
    normalized = " ".join(str(value).lower().split())
    return hashlib.sha256(normalized.encode("utf-8")).hexdigest()[:32]


def point_id(scope: Scope, item_id: str) -> str:
    """The store's point id for an item: deterministic, so a redelivered write lands on the same point."""
    return str(uuid.uuid5(_POINT_NAMESPACE, "\x1f".join((*scope, item_id))))


def set_point_id(namespace: str, key: str, set_name: str) -> str:
    """The point id of a memory set's definition in the registry collection."""
    return str(uuid.uuid5(_POINT_NAMESPACE, f"set\x1f{namespace}\x1f{key}\x1f{set_name}"))


@dataclass(frozen=True, slots=True)
class ItemRecord:
    """An item ready for the store: the item, its order in the set, and its embedding."""

    item: MemorySetItem
    seq: int
    vector: Sequence[float]


def _ts(moment: datetime) -> float:
    return moment.timestamp()


def _dt(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def to_payload(scope: Scope, record: ItemRecord) -> dict[str, Any]:
    """The stored payload of an item; times are epoch seconds so range filters stay cheap."""
    item = record.item
    created = item.created_time
    start, end = (created.start, created.end) if isinstance(created, DatetimeRange) else (created, created)
    value = item.value if isinstance(item.value, str) else item.value.model_dump(mode="json")
    return {
        "namespace": scope.namespace,
        "key": scope.key,
        "set": scope.set_name,
        "item_id": item.id,
        "seq": record.seq,
        "value": value,
        "is_message": not isinstance(item.value, str),
        "compacted": item.compacted,
        "created_start": _ts(start),
        "created_end": _ts(end),
        "created_is_range": isinstance(created, DatetimeRange),
        "last_accessed_time": _ts(item.last_accessed_time),
        "metadata": dict(item.additional_metadata),
        "compacted_from": list(item.compacted_from),
        "importance": item.importance,
        "source": item.source,
        # An int, not a bool: qdrant-edge-py 0.9.0 cannot match booleans (MatchValue(True) becomes 1).
        "pinned": int(item.pinned),
        "expires_at": None if item.expires_at is None else _ts(item.expires_at),
        "text_hash": text_hash(item.value),
        **fact_payload(item.fact),
    }


def oldest_by_hash(payloads: Iterable[Mapping[str, Any]]) -> dict[str, MemorySetItem]:
    """One item per text hash: the oldest (lowest seq), so every fold of a text goes to the same item."""
    oldest: dict[str, Mapping[str, Any]] = {}
    for payload in payloads:
        seen = oldest.get(payload["text_hash"])
        if seen is None or payload["seq"] < seen["seq"]:
            oldest[payload["text_hash"]] = payload
    return {text: from_payload(payload) for text, payload in oldest.items()}


def lifecycle_payload(item: MemorySetItem) -> dict[str, Any]:
    """The payload fields of ``item``'s lifecycle (for ``set_fields``), as ``to_payload`` writes them."""
    return {
        "importance": item.importance,
        "source": item.source,
        "pinned": int(item.pinned),
        "expires_at": None if item.expires_at is None else _ts(item.expires_at),
    }


def fact_payload(fact: FactInfo | None) -> dict[str, Any]:
    """The payload fields of an item's fact (for ``set_fields``), as ``to_payload`` writes them: the fact, and
    ``superseded``, the flag searches leave out by default (an int like ``pinned``: the embedded engine cannot
    match booleans). Write both together, so the flag never disagrees with the fact's ``valid_to``."""
    return {
        "fact": None if fact is None else fact.model_dump(mode="json"),
        "superseded": int(fact is not None and not fact.live),
    }


def is_superseded(payload: Mapping[str, Any]) -> bool:
    """Whether a stored payload is a fact that formation superseded (a payload of before facts is not)."""
    return bool(payload.get("superseded"))


def from_payload(payload: Mapping[str, Any], score: float | None = None) -> MemorySetItem:
    """Rebuilds the item a payload was made from (``to_payload``'s inverse)."""
    start, end = _dt(payload["created_start"]), _dt(payload["created_end"])
    created: datetime | DatetimeRange = DatetimeRange(start=start, end=end) if payload["created_is_range"] else start
    return MemorySetItem.model_validate(
        {
            "memory_set_name": payload["set"],
            "id": payload["item_id"],
            "value": payload["value"],
            "compacted": payload["compacted"],
            "created_time": created,
            "last_accessed_time": _dt(payload["last_accessed_time"]),
            "additional_metadata": payload.get("metadata") or {},
            "compacted_from": payload.get("compacted_from") or [],
            "importance": payload.get("importance", 0.5),
            "source": payload.get("source"),
            "pinned": bool(payload.get("pinned", 0)),
            "expires_at": None if payload.get("expires_at") is None else _dt(payload["expires_at"]),
            "seq": payload["seq"],
            "score": score,
            "fact": payload.get("fact"),  # validated into a FactInfo; absent from payloads of before facts
        }
    )


def tombstone_payload(scope: Scope, item_id: str, seq: int, keep_until: float) -> dict[str, Any]:
    """The payload of a deleted item's tombstone: which item, the delete's ``seq``, and when it may go.

    It passes every read's visibility check as an expired, unpinned point (``expires_at`` 0), so no read
    path returns it; ``keep_until`` holds the TTL sweep off it until then.
    """
    return {
        "namespace": scope.namespace,
        "key": scope.key,
        "set": scope.set_name,
        "item_id": item_id,
        "seq": seq,
        "tombstone": 1,
        "expires_at": 0.0,
        "pinned": 0,
        "keep_until": keep_until,
    }


OWED_FOREVER = 1e18
"""The ``keep_until`` of an owed placeholder: the TTL sweep never takes it; the reindex that owes it does."""


def owed_payload(scope: Scope, item_id: str, seq: int) -> dict[str, Any]:
    """The payload of a reindex target's *owed* placeholder for an item written at ``seq`` in the source.

    The live path never waits for the target's embedder: it writes this instead, one point without vectors
    at ``seq - 1``. As a tombstone just older than the write, it hides whatever older copy the target held
    (so the target cannot look up to date), keeps out any copy older than the write (``due``), and lets the
    copy of the write itself, or anything newer, replace it. The reindex finds placeholders by ``owed`` and
    copies their items from the source (``Reindexable.owed``); a switch waits until none is left.
    """
    return {**tombstone_payload(scope, item_id, seq - 1, OWED_FOREVER), "owed": 1}


def is_tombstone(payload: Mapping[str, Any]) -> bool:
    """Whether a stored payload marks a deleted item."""
    return bool(payload.get("tombstone"))


def due(stored: Mapping[str, tuple[int, bool]], wanted: Mapping[str, int], *, deleting: bool) -> list[str]:
    """The ids (or point ids) whose write must be applied: ``wanted`` maps each to its write's ``seq``,
    ``stored`` to the ``(seq, is_tombstone)`` of what the store holds under it (absent: nothing).

    An upsert applies over anything older. A delete applies over an item as old as it or older (the very
    version it read, for compaction and eviction) and over an older tombstone; a replayed delete (an equal
    tombstone) changes nothing.
    """
    applied = []
    for key, seq in wanted.items():
        held = stored.get(key)
        if held is None:
            applied.append(key)
            continue
        held_seq, tombstone = held
        if held_seq < seq or (deleting and not tombstone and held_seq == seq):
            applied.append(key)
    return applied


def chunks(seq_by_id: Mapping[str, int], size: int = CONDITIONAL_BATCH) -> Iterator[dict[str, int]]:
    """``seq_by_id`` in pieces of at most ``size`` (conditional writes are checked per point of the call)."""
    pairs = list(seq_by_id.items())
    for start in range(0, len(pairs), size):
        yield dict(pairs[start : start + size])


def newest_records(records: Sequence[ItemRecord]) -> list[ItemRecord]:
    """One record per item id, the newest ``seq`` (a batch that names an id twice writes its latest)."""
    newest: dict[str, ItemRecord] = {}
    for record in records:
        held = newest.get(record.item.id)
        if held is None or record.seq > held.seq:
            newest[record.item.id] = record
    return list(newest.values())


def versions_of(items: Iterable[MemorySetItem]) -> dict[str, int]:
    """Item id -> ``seq`` of items read from a store: what a delete of exactly these versions takes."""
    return {item.id: item.seq or 0 for item in items}


def set_to_payload(namespace: str, key: str, definition: MemorySet) -> dict[str, Any]:
    """The registry payload of a set definition."""
    return {
        "namespace": namespace,
        "key": key,
        "set": definition.name,
        "definition": definition.model_dump(mode="json"),
    }


def set_from_payload(payload: Mapping[str, Any]) -> MemorySet:
    """Rebuilds a set definition from its registry payload."""
    return MemorySet.model_validate(payload["definition"])


def context_windows(definitions: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], int]:
    """Each set's ``context_window``, by scope, from registry payloads (for re-indexing its items)."""
    return {(p["namespace"], p["key"], p["set"]): set_from_payload(p).context_window for p in definitions}


def is_visible(payload: Mapping[str, Any], now: float) -> bool:
    """Whether reads may see a stored item: not expired, or pinned."""
    expires = payload.get("expires_at")
    return expires is None or expires > now or bool(payload.get("pinned"))


def in_scope(payload: Mapping[str, Any], scope: Scope) -> bool:
    """Whether a stored payload belongs to ``scope`` (a guard on top of the scoped point ids and filters)."""
    return (payload.get("namespace"), payload.get("key"), payload.get("set")) == tuple(scope)


PointKey = Any
"""A point's id as a store hands it back (a str or a UUID): hashable, and ordered among its kind."""
Ranking = list[tuple[PointKey, float]]
"""A ranker's candidates as (point id, score), best first."""

HYBRID_RANKERS = 1 + len(SPARSE_NAMES)
"""The rankers a ``hybrid`` search fuses: dense, then each lexical ranker near-tie broken by cosine."""


def dbsf_scaled(scores: Sequence[float]) -> list[float]:
    """One ranking's scores as DBSF scales them: to about 0..1 by their mean +/- 3 sample standard deviations
    (a ranking of one, or of equal scores, scores 0.5)."""
    scaled = [0.5] * len(scores)
    if len(scores) > 1:
        # Plain floats: ``statistics.stdev`` is exact (fractions), ~20x slower, for no ranking difference.
        mean = math.fsum(scores) / len(scores)
        spread = 3 * math.sqrt(math.fsum((s - mean) ** 2 for s in scores) / (len(scores) - 1))
        if spread > 0:
            scaled = [(s - mean + spread) / (2 * spread) for s in scores]
    return scaled


def dbsf(rankings: Sequence[Ranking]) -> Ranking:
    """Distribution-based score fusion, as the engine computes it: each ranking's scores scaled
    (``dbsf_scaled``), then summed per point."""
    fused: dict[PointKey, float] = {}
    for ranking in rankings:
        for (point, _), value in zip(ranking, dbsf_scaled([score for _, score in ranking]), strict=True):
            fused[point] = fused.get(point, 0.0) + value
    # Best first; exact ties (items of the same text and vector) by point id, so a search answers alike each time.
    return sorted(fused.items(), key=lambda fused_point: (-fused_point[1], fused_point[0]))


def fused_hybrid(dense: Ranking, lexical: Sequence[Ranking], cosines: Mapping[PointKey, float], limit: int) -> Ranking:
    """The best ``limit`` points of a ``hybrid`` search, by fused score (a sum over ``HYBRID_RANKERS``).

    ``lexical``: each lexical ranker's candidates by BM25, as the store found them; ``cosines``: their
    similarity to the query. Each lexical ranker's candidates are scored BM25 + ``TIE_BREAK`` x cosine and
    fused with ``dense`` by DBSF. The stores used to compute this inside one engine query, which evaluated
    each lexical ranker twice (once for its candidates, once again inside their dense rescoring); they now
    fetch each ranking once and fuse here."""
    depth = max(PREFETCH, limit)
    tie_broken = [
        sorted(((point, bm25 + TIE_BREAK * cosines.get(point, 0.0)) for point, bm25 in ranking), key=lambda p: -p[1])
        for ranking in lexical
    ]
    return dbsf([dense[:depth], *(ranking[:depth] for ranking in tie_broken)])[:limit]


def fused_items(best: Ranking, payloads: Mapping[PointKey, Mapping[str, Any] | None]) -> list[MemorySetItem]:
    """The items of ``fused_hybrid``'s ``best``, from their stored ``payloads``, each scored by the mean of its
    rankers' scaled scores. A point deleted or expired since the rankers read it is left out, as one fused
    query would have."""
    now = time.time()
    found = [(payloads.get(point), score) for point, score in best]
    return [
        from_payload(payload, score=min(1.0, score / HYBRID_RANKERS))
        for payload, score in found
        if payload is not None and not is_tombstone(payload) and is_visible(payload, now)
    ]


def require_set(store: VectorStore, scope: Scope) -> MemorySet:
    """The definition of the set at ``scope``; raises ``MemorySetNotFound`` naming it when there is none."""
    definition = store.get_set(*scope)
    if definition is None:
        raise MemorySetNotFound(
            f"memory set {scope.set_name!r} not found in namespace {scope.namespace!r}, key {scope.key!r}"
        )
    return definition


def sort_by_seq(pairs: Sequence[tuple[int, MemorySetItem]]) -> list[MemorySetItem]:
    """Items in insertion order, from ``(seq, item)`` pairs."""
    return [item for _, item in sorted(pairs, key=lambda pair: pair[0])]


class VectorStore(Protocol):
    """Durable storage of memory items and set definitions, with vector search."""

    @property
    def location(self) -> str:
        """Where the data lives (a directory or a redacted URL), for operators."""
        ...

    def recorded_fingerprint(self) -> EmbedderFingerprint | None:
        """The fingerprint of the embedder whose vectors the store holds, as recorded; None if none is."""
        ...

    def record_fingerprint(self, fingerprint: EmbedderFingerprint) -> None:
        """Records (replaces) the store's embedder fingerprint, durably."""
        ...

    def upsert(self, scope: Scope, records: Sequence[ItemRecord], *, context_window: int = 0) -> None:
        """Writes items, each only where nothing newer is stored under its id. Durable on return.

        A record replaces a stored item or tombstone of the same id only when that one's ``seq`` is
        lower; an equal ``seq`` (the same write, replayed) or a higher one keeps what is stored.

        ``context_window``: how many of the set's previous items (by ``seq``) go into each item's
        context vector (``bm25_ctx``); 0 indexes the item's own text there.
        """
        ...

    def retrieve(self, scope: Scope, item_ids: Sequence[str]) -> list[MemorySetItem]:
        """The visible items with these ids, in insertion order. Every read skips expired, unpinned items."""
        ...

    def list_items(self, scope: Scope) -> list[MemorySetItem]:
        """Every item of the set, in insertion order."""
        ...

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
        """The ``limit`` items most relevant to the query whose metadata match ``filters``; best first.

        ``dense``: nearest to ``vector`` (cosine). ``lexical``: BM25 of ``text`` over the item and its
        context, fused. ``hybrid``: all three rankers fused by distribution-based score fusion (DBSF).
        Facts that formation superseded (``superseded`` 1) are left out, in every mode and before the ``limit``
        is taken, unless ``include_superseded``; ``retrieve`` and ``list_items`` return them regardless.
        """
        ...

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
        """``search``'s hits (the same items, order and scores), each with every ranker's raw score and scaled part
        (``core.messages.Explained``); in ``lexical`` mode the two rankers are fused here rather than in the engine,
        so hits of exactly equal scores may come in another order."""
        ...

    def page_items(
        self, scope: Scope, query: BrowseQuery, cursor: str | None, limit: int
    ) -> tuple[list[MemorySetItem], str | None]:
        """Up to ``limit`` visible items of the set that ``query`` lists (superseded facts included), in its order,
        after ``cursor`` (a cursor this returned, for this set and order; None: the first page); and the cursor of
        the next page, None after the last. A cursor that is not one, or of another set or order, is refused with
        ``InvalidRequestError``. Each page costs about what its own items cost, however deep (``stores.paging``)."""
        ...

    def count_matching(self, scope: Scope, query: BrowseQuery) -> int:
        """How many visible items of the set ``query`` lists (exact)."""
        ...

    def count(self, scope: Scope) -> int:
        """The number of items in the set."""
        ...

    def delete(self, scope: Scope, versions: Mapping[str, int]) -> None:
        """Deletes items as of a ``seq`` each: item id -> the delete's ``seq``.

        Each item stored with a ``seq`` at most its delete's (or not stored at all) is replaced by a
        tombstone at that ``seq``; an item stored newer stays. Writes no older than the tombstone are
        refused until the TTL sweep removes it (``tombstone_ttl`` after the delete).
        """
        ...

    def item_versions(self, scope: Scope) -> dict[str, int]:
        """Item id -> ``seq`` of every item stored in the set (expired ones too; tombstones not)."""
        ...

    def put_set(self, namespace: str, key: str, definition: MemorySet) -> None:
        """Stores a set definition durably."""
        ...

    def get_set(self, namespace: str, key: str, set_name: str) -> MemorySet | None:
        """A set definition, or None."""
        ...

    def delete_set(self, namespace: str, key: str, set_name: str) -> bool:
        """Removes a set definition; False when there was none. Items are deleted separately."""
        ...

    def list_sets(self, limit: int) -> list[tuple[str, str, MemorySet]]:
        """Up to ``limit`` set definitions of every namespace, as ``(namespace, key, definition)``; for sweeps."""
        ...

    def sets_of(self, namespace: str, key: str) -> list[MemorySet]:
        """The set definitions of one key of one namespace, sorted by name."""
        ...

    def set_fields(
        self, scope: Scope, item_ids: Sequence[str], fields: Mapping[str, Any], *, seq: int | None = None
    ) -> None:
        """Overwrites these payload fields (``to_payload`` names) on stored items; missing and deleted ids are
        ignored. With ``seq``, only items still stored at that ``seq`` (not rewritten since it was read)."""
        ...

    def find_by_text_hash(self, scope: Scope, hashes: Sequence[str]) -> dict[str, MemorySetItem]:
        """Visible items of the set whose normalized text hashes are among ``hashes``, by hash: the oldest of each."""
        ...

    def expired(self, now: float, limit: int) -> list[tuple[Scope, str]]:
        """Up to ``limit`` expired, unpinned items of every namespace, as ``(scope, item id)`` (no tombstones)."""
        ...

    def forget(self, namespace: str, key: str | None) -> tuple[int, list[str]]:
        """Deletes every item and set definition of a namespace (or one key of it), expired ones included.

        Returns the number of items deleted and the ``key:set`` names of the sets removed.
        """
        ...

    def delete_expired(self, now: float, limit: int) -> int:
        """Deletes expired, unpinned items and tombstones past ``keep_until`` of every namespace: one filtered
        delete when at most ``limit`` are due, else ``limit`` of them (the rest next time). Returns how many
        went."""
        ...

    def namespace_counts(self, limit: int) -> dict[str, int]:
        """Items stored per namespace (visible ones; a server may count expired ones too), the ``limit`` largest.

        For metrics: cheap enough to run every scrape interval, not exact to the last write."""
        ...

    def item_vectors(self, scope: Scope, item_ids: Sequence[str]) -> dict[str, list[float]]:
        """The dense vectors of these items of the set, by id (missing ids are absent); for export."""
        ...

    def snapshot(self, target: Path) -> list[str]:
        """A consistent copy of the store's data: files under ``target`` (embedded engines) or the server's
        own snapshots (Qdrant's snapshot API). Writes wait while it is taken. Returns what was made."""
        ...

    def optimize(self) -> bool:
        """Builds the search indexes (HNSW) over what was written since the last run; blocks until done.

        For the maintenance task only. Returns whether anything was optimized. A Qdrant server optimizes in
        the background by itself, so there it does nothing.
        """
        ...

    def close(self) -> None:
        """Releases files, locks and connections."""
        ...


@dataclass(frozen=True, slots=True)
class RawPoint:
    """A stored point as a reindex copies it: its id, its payload and its BM25 vectors (which depend on no
    embedding model, so they are copied as they are; only the dense vector is made anew)."""

    id: str
    payload: dict[str, Any]
    sparse: dict[str, SparseVector]

    @property
    def tombstone(self) -> bool:
        return is_tombstone(self.payload)

    @property
    def owed(self) -> bool:
        """An owed placeholder (``owed_payload``), not a delete."""
        return bool(self.payload.get("owed"))

    @property
    def seq(self) -> int:
        return int(self.payload["seq"])


def scanned_page(
    records: Iterable[tuple[object, Mapping[str, Any] | None, object]], offset: object | None, stop: str | None
) -> tuple[list[RawPoint], str | None]:
    """A page of an engine's scroll as ``Reindexable.scan`` returns it: records ``(id, payload, vectors)`` below
    ``stop`` as ``RawPoint`` (their BM25 vectors read from the engine's sparse type, which has ``indices`` and
    ``values``), and the id the next page starts at, None past ``stop`` or at the end."""
    points = [
        RawPoint(
            str(pid),
            dict(payload),
            {
                name: SparseVector(tuple(vector.indices), tuple(vector.values))
                for name, vector in (vectors.items() if isinstance(vectors, dict) else ())
                if name in SPARSE_NAMES and hasattr(vector, "indices")
            },
        )
        for pid, payload, vectors in records
        if payload is not None and (stop is None or str(pid) < stop)
    ]
    following = None if offset is None else str(offset)
    return points, None if following is None or (stop is not None and following >= stop) else following


def copies_by_kind(
    points: Sequence[tuple[RawPoint, Sequence[float] | None]],
) -> Iterator[tuple[bool, list[tuple[RawPoint, Sequence[float] | None]]]]:
    """Copied points split for ``copy_in``: items (written as upserts), then tombstones (written as deletes)."""
    for deleting in (False, True):
        batch = [(point, dense) for point, dense in points if point.tombstone == deleting]
        if batch:
            yield deleting, batch


class Reindexable(Protocol):
    """What a reindex needs of a store beyond ``VectorStore`` (both Qdrant adapters have it): named records
    in the metadata collection, a second items collection beside the open one, and copies of points in
    point-id order that keep the monotonic rules (``due``)."""

    @property
    def collection(self) -> str:
        """The name of the items collection this store reads and writes."""
        ...

    def read_record(self, name: str) -> dict[str, Any] | None:
        """The metadata record ``name`` (``fingerprints.record_point``), or None."""
        ...

    def write_record(self, name: str, payload: Mapping[str, Any]) -> None:
        """Replaces the metadata record ``name``, durably."""
        ...

    def open_sibling(self, collection: str, dimension: int) -> ReindexableStore:
        """Another items collection (and its set registry) of the same store, created if missing, with vectors
        of ``dimension``: it shares this store's files or connection, checks no fingerprint and migrates no
        earlier layout. Closing it releases only what it opened."""
        ...

    def drop_collection(self, collection: str) -> bool:
        """Deletes an items collection of the store and its set registry (never the open one); False if absent."""
        ...

    def scan(self, start: str, stop: str | None, limit: int) -> tuple[list[RawPoint], str | None]:
        """Up to ``limit`` points (tombstones too) with ids from ``start`` (inclusive) below ``stop``, in
        point-id order, and the id to start the next page at (None: nothing more below ``stop``)."""
        ...

    def versions(self, ids: Sequence[str]) -> dict[str, tuple[int, bool]]:
        """Point id -> ``(seq, is_tombstone)`` of the points stored under these ids (absent: none)."""
        ...

    def copy_in(self, points: Sequence[tuple[RawPoint, Sequence[float] | None]]) -> int:
        """Writes copied points, each with its new dense vector (None for a tombstone), only over older ones
        (an item over an older point; a tombstone as a delete would). Returns how many were written."""
        ...

    def point_count(self) -> int:
        """Points in the items collection, tombstones included (exact)."""
        ...

    def raw_points(self, ids: Sequence[str]) -> dict[str, RawPoint]:
        """The points stored under these ids (tombstones too), as ``scan`` gives them, by id (absent: none)."""
        ...

    def owe(self, scope: Scope, versions: Mapping[str, int]) -> None:
        """Writes an owed placeholder (``owed_payload``) for each item id -> the ``seq`` of its write in the
        source, where nothing as new is stored under its id."""
        ...

    def owed(self, limit: int) -> list[str]:
        """Up to ``limit`` point ids of owed placeholders."""
        ...

    def owed_count(self) -> int:
        """How many owed placeholders the collection holds (exact)."""
        ...

    def remove_unchanged(self, held: Mapping[str, int]) -> int:
        """Deletes each point (id -> the ``seq`` it was read with) that still holds that ``seq``, leaving no
        tombstone: a copy of an item that the source no longer holds (erased, or swept). Returns how many went."""
        ...


class ReindexableStore(VectorStore, Reindexable, Protocol):
    """A ``VectorStore`` a reindex can run on."""
