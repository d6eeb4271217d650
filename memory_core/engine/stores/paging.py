"""Browsing a set page by page (``VectorStore.page_items``) and explaining a search's scores (``explain``).

Pages are keyset pages: one total order over the visible items that match a ``BrowseQuery`` (the sort key, then
``seq``, then the item id, all in the page's direction), and a page starts strictly after the last item of the
page before. The cursor holds that item's place (``Position``), so paging costs what one page costs however deep
it goes, and writes elsewhere in the set never shift a page.

The engines order by an indexed field exactly, but a start bound on ``seq`` goes through a float, which cannot
hold a nanosecond ``seq`` (~1.8e18: one float step is 256 there). A scroll by ``seq`` therefore starts at a value
a float holds exactly, at most one step past the cursor; fetches a few more than the page needs; and the exact
cut is made here. The other sort keys are floats in the payload, so their range bounds are exact; their ties
(importance 0.5 for most items, one creation time for every item of one ``add``) are paged by ``seq`` in turn.

Explanations keep what fusion otherwise throws away: each ranker's raw score and its DBSF-scaled part.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt

from memory_core.core.errors import InvalidRequestError
from memory_core.core.messages import BrowseQuery, BrowseSort, Explained, contained_words
from memory_core.core.models import ItemId, MemorySetItem, Scope
from memory_core.core.validation import short_repr
from memory_core.engine.stores.base import (
    HYBRID_RANKERS,
    PREFETCH,
    TIE_BREAK,
    PointKey,
    Ranking,
    dbsf_scaled,
    from_payload,
    is_tombstone,
    is_visible,
)

SORT_FIELDS: dict[BrowseSort, str] = {
    "created": "created_start",
    "updated": "seq",
    "importance": "importance",
    "last_access": "last_accessed_time",
    "expires": "expires_at",
}
"""The payload field each browse sort orders by (each has a range index)."""
TEXT_INDEX_FIELDS = ("value", "value.content")
"""Fields with a word index (lower-cased), for ``contains``: a text item's value, a chat message's content."""
EARLIEST = -1e300
"""A range bound below every time: "has an expiry" as ``expires_at >= EARLIEST`` is answered from the range index
(0.7 ms to count 5,000 of 100,000 items), where "not empty" reads each item (5.8 ms)."""
EXTRA = 16
"""Items a scroll by ``seq`` fetches beyond what the page needs, for those it cuts (the start's float step, a
tie group of the last ``seq`` fetched); four times more on each retry."""

Payload = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Position:
    """An item's place in a browse order: its sort value (None when sorting by ``seq`` itself), ``seq`` and id."""

    value: float | None
    seq: int
    item_id: str


@dataclass(frozen=True, slots=True)
class Bound:
    """A range condition on a numeric payload field, for an adapter to turn into its engine's."""

    field: str
    gte: float | None = None
    gt: float | None = None
    lte: float | None = None
    lt: float | None = None


Scroll = Callable[[Sequence[Bound], str, bool, int | None, int], list[Payload]]
"""An adapter's ordered scroll over a browse's filter: ``(extra bounds, order field, descending, start, limit)``
-> up to ``limit`` payloads in the engine's order of that field (``start``: an integer start bound on ``seq``)."""


def union(scrolls: Sequence[Scroll]) -> Scroll:
    """One ordered scroll over the disjoint union of what ``scrolls`` list (each ordered alike): the first ``limit``
    of the union are among the first ``limit`` of each."""
    if len(scrolls) == 1:
        return scrolls[0]

    def merged(bounds: Sequence[Bound], order: str, descending: bool, start: int | None, limit: int) -> list[Payload]:
        found = [payload for scroll in scrolls for payload in scroll(bounds, order, descending, start, limit)]
        return sorted(found, key=lambda payload: payload[order], reverse=descending)[:limit]

    return merged


# -- the cursor -------------------------------------------------------------------------------------------------

_CURSOR_CHARS = re.compile(r"[A-Za-z0-9_-]+")


class _CursorBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    v: int = Field(ge=1, le=1)
    s: str  # the scope's tag: a cursor of one set is refused by another
    o: BrowseSort
    d: StrictBool
    k: tuple[StrictFloat | StrictInt | None, StrictInt, ItemId]


def _scope_tag(scope: Scope) -> str:
    return hashlib.sha256("\x1f".join(scope).encode("utf-8")).hexdigest()[:16]


def encode_cursor(scope: Scope, query: BrowseQuery, position: Position) -> str:
    """The opaque cursor of ``position`` in ``query``'s order of ``scope``: base64url of a small JSON object."""
    body = {
        "v": 1,
        "s": _scope_tag(scope),
        "o": query.sort,
        "d": query.descending,
        "k": [position.value, position.seq, position.item_id],
    }
    packed = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return base64.urlsafe_b64encode(packed).rstrip(b"=").decode("ascii")


def decode_cursor(cursor: str, scope: Scope, query: BrowseQuery) -> Position:
    """The place a cursor of ``encode_cursor`` holds; ``InvalidRequestError`` naming it when it is not one, or is
    one of another set or another order. A cursor is not secret (it holds an item's id and sort values) and needs no
    signature: a forged one can only start a page of this same set somewhere else."""
    shown = short_repr(cursor)
    if not isinstance(cursor, str) or not _CURSOR_CHARS.fullmatch(cursor):
        raise InvalidRequestError(f"cursor {shown} is not a browse cursor; pass a page's next_cursor, or None")
    try:
        body = _CursorBody.model_validate_json(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError) as exc:  # a pydantic ValidationError is a ValueError
        raise InvalidRequestError(
            f"cursor {shown} is not a browse cursor (damaged or made up); pass a page's next_cursor, or None"
        ) from exc
    if body.s != _scope_tag(scope):
        raise InvalidRequestError(
            f"cursor {shown} belongs to another memory set than {scope.set_name!r} of namespace "
            f"{scope.namespace!r}, key {scope.key!r}; start this set from its first page (cursor None)"
        )
    if (body.o, body.d) != (query.sort, query.descending):
        raise InvalidRequestError(
            f"cursor {shown} continues sort {body.o!r} {'descending' if body.d else 'ascending'}, not "
            f"{query.sort!r} {'descending' if query.descending else 'ascending'}; start from the first page"
        )
    value, seq, item_id = body.k
    by_seq = SORT_FIELDS[body.o] == "seq"
    if (value is None) != by_seq or seq < 0 or (value is not None and not math.isfinite(value)):
        raise InvalidRequestError(f"cursor {shown} holds no place in a {body.o!r} order; start from the first page")
    return Position(None if value is None else float(value), seq, item_id)


def position(payload: Mapping[str, Any], field: str) -> Position:
    """The place of a stored item in the order of ``field``."""
    value = None if field == "seq" else float(payload[field])
    return Position(value, int(payload["seq"]), str(payload["item_id"]))


# -- one page ---------------------------------------------------------------------------------------------------


def _key(payload: Mapping[str, Any], field: str) -> tuple[float, int, str]:
    return (0.0 if field == "seq" else float(payload[field]), int(payload["seq"]), str(payload["item_id"]))


def _after_key(after: Position, field: str) -> tuple[float, int, str]:
    # Within a tie group (ordered by ``seq``) the cursor's value is every item's: compare (seq, id) alone.
    return (0.0 if field == "seq" or after.value is None else after.value, after.seq, after.item_id)


def _ordered(payloads: Sequence[Payload], field: str, descending: bool) -> list[Payload]:
    return sorted(payloads, key=lambda p: _key(p, field), reverse=descending)


def _beyond(payloads: Sequence[Payload], field: str, descending: bool, after: Position | None) -> list[Payload]:
    """``payloads`` that come strictly after ``after`` in the order, in order."""
    ordered = _ordered(payloads, field, descending)
    if after is None:
        return ordered
    cut = _after_key(after, field)
    return [p for p in ordered if (_key(p, field) < cut if descending else _key(p, field) > cut)]


def exact_page(
    payloads: Sequence[Payload], field: str, descending: bool, after: Position | None, count: int
) -> list[Payload]:
    """The first ``count`` of ``payloads`` after ``after`` in the order of ``field`` (those without it left out):
    the whole order made in Python, for a store that holds its items in memory."""
    present = [p for p in payloads if p.get(field) is not None]
    return _beyond(present, field, descending, after)[:count]


def keyset_page(scroll: Scroll, field: str, descending: bool, after: Position | None, count: int) -> list[Payload]:
    """The first ``count`` items after ``after`` in the order of ``field``, from an engine's ordered ``scroll``.

    By a float field: the rest of the cursor's tie group (by ``seq``), then the items beyond its value in the
    field's order; the last value fetched may have been cut short, so its tie group is fetched again by ``seq``.
    At most three scrolls by the field, each a few more by ``seq`` when a start's float step hides many items.
    """
    if field == "seq":
        return _by_seq(scroll, [], descending, after, count)
    found: list[Payload] = []
    beyond: list[Bound] = []
    if after is not None and after.value is not None:
        tied = Bound(field, gte=after.value, lte=after.value)
        found = _by_seq(scroll, [tied], descending, after, count)
        if len(found) >= count:
            return found[:count]
        beyond = [Bound(field, lt=after.value) if descending else Bound(field, gt=after.value)]
    need = count - len(found)
    fetched = scroll(beyond, field, descending, None, need)
    if len(fetched) < need:
        return found + _ordered(fetched, field, descending)
    last = fetched[-1][field]  # the engine's order is exact: only this value's group may be cut
    head = _ordered([p for p in fetched if p[field] != last], field, descending)
    group = _by_seq(scroll, [*beyond, Bound(field, gte=last, lte=last)], descending, None, need - len(head))
    return found + head + group


def _seq_start(seq: int, descending: bool) -> int:
    """The integer nearest ``seq`` on its far side (no earlier in the order) that a float holds exactly: a start
    bound the engine's float conversion keeps as it is."""
    start = float(seq)
    if descending and int(start) < seq:
        start = math.nextafter(start, math.inf)
    elif not descending and int(start) > seq:
        start = math.nextafter(start, -math.inf)
    return int(start)


def _by_seq(
    scroll: Scroll, bounds: Sequence[Bound], descending: bool, after: Position | None, count: int
) -> list[Payload]:
    """The first ``count`` items matching ``bounds`` after ``after`` by (``seq``, id). The start is at most one
    float step before the cursor, so the cursor's own neighbours come back too and are cut here."""
    extra = EXTRA
    start = None if after is None else _seq_start(after.seq, descending)
    while True:
        fetch = count + extra
        fetched = scroll(bounds, "seq", descending, start, fetch)
        wanted = _beyond(fetched, "seq", descending, after)
        if len(fetched) < fetch:  # the engine had no more: this is all there is
            return wanted[:count]
        last = fetched[-1]["seq"]  # ordered exactly by seq: items of a lower seq (higher, ascending) all came
        complete = [p for p in wanted if p["seq"] != last]
        if len(complete) >= count:
            return complete[:count]
        extra *= 4


def browse_page(
    scope: Scope,
    query: BrowseQuery,
    cursor: str | None,
    limit: int,
    fetch: Callable[[str, Position | None, int], list[Payload]],
) -> tuple[list[MemorySetItem], str | None]:
    """A page of ``limit`` items after ``cursor`` and the next page's cursor (None after the last page).

    ``fetch(field, after, count)``: the first ``count`` matching items after ``after`` in the order of ``field``
    (``exact_page`` or ``keyset_page``). One more than the page is fetched, to know whether another page follows.
    """
    after = None if cursor is None else decode_cursor(cursor, scope, query)
    field = SORT_FIELDS[query.sort]
    found = fetch(field, after, limit + 1)
    page = found[:limit]
    following = encode_cursor(scope, query, position(page[-1], field)) if len(found) > limit else None
    return [from_payload(payload) for payload in page], following


def matches(payload: Mapping[str, Any], query: BrowseQuery) -> bool:
    """Whether a visible item's payload matches ``query`` but for its metadata (which the store matches as it does
    search filters), as the engines' filters decide it."""
    if query.contains is not None:
        value = payload["value"]
        text = value if isinstance(value, str) else str(value.get("content", ""))
        if not set(contained_words(query.contains)) <= set(contained_words(text)):
            return False
    created = payload["created_start"]
    if query.created_after is not None and created < query.created_after.timestamp():
        return False
    if query.created_before is not None and created >= query.created_before.timestamp():
        return False
    checks = [
        (query.compacted, bool(payload.get("compacted_from"))),
        (query.pinned, bool(payload.get("pinned"))),
        (query.expiring, payload.get("expires_at") is not None),
        (True if query.sort == "expires" else None, payload.get("expires_at") is not None),  # no expiry, no place
    ]
    if any(wanted is not None and wanted != held for wanted, held in checks):
        return False
    importance = payload.get("importance", 0.5)
    low, high = query.min_importance, query.max_importance
    return (low is None or importance >= low) and (high is None or importance <= high)


# -- explanations -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Parts:
    """Each ranker's part in one fused hit: raw scores and DBSF-scaled parts (None: the ranker did not return it)."""

    fused: float | None
    dense: float | None = None
    dense_scaled: float | None = None
    bm25: float | None = None
    bm25_scaled: float | None = None
    context: float | None = None
    context_scaled: float | None = None


def dbsf_parts(rankings: Sequence[Ranking]) -> list[tuple[PointKey, list[float | None]]]:
    """``base.dbsf`` keeping each ranking's scaled part per point; the same order (and, summed, the same scores)."""
    parts: dict[PointKey, list[float | None]] = {}
    for n, ranking in enumerate(rankings):
        for (point, _), value in zip(ranking, dbsf_scaled([score for _, score in ranking]), strict=True):
            parts.setdefault(point, [None] * len(rankings))[n] = value
    return sorted(parts.items(), key=lambda entry: (-_total(entry[1]), entry[0]))


def _total(parts: Sequence[float | None]) -> float:
    return sum(part for part in parts if part is not None)  # summed in ranking order, as ``dbsf`` adds them


def hybrid_parts(
    dense: Ranking, lexical: Sequence[Ranking], cosines: Mapping[PointKey, float], limit: int
) -> list[tuple[PointKey, Parts]]:
    """``base.fused_hybrid``'s best ``limit`` points, each with its parts (``cosines``: of the lexical candidates)."""
    depth = max(PREFETCH, limit)
    tie_broken = [
        sorted(((point, bm25 + TIE_BREAK * cosines.get(point, 0.0)) for point, bm25 in ranking), key=lambda p: -p[1])
        for ranking in lexical
    ]
    similarity = {**cosines, **dict(dense)}
    raw = [dict(ranking) for ranking in lexical]
    best = []
    for point, (dense_scaled, *scaled) in dbsf_parts([dense[:depth], *(r[:depth] for r in tie_broken)])[:limit]:
        parts = Parts(
            fused=min(1.0, _total([dense_scaled, *scaled]) / HYBRID_RANKERS),
            dense=similarity.get(point),
            dense_scaled=dense_scaled,
            **_lexical_fields(raw, scaled, point),
        )
        best.append((point, parts))
    return best


def lexical_parts(lexical: Sequence[Ranking], limit: int) -> list[tuple[PointKey, Parts]]:
    """A ``lexical`` search's best ``limit`` points (its rankers fused by DBSF, as the engine fuses them), with
    their parts."""
    depth = max(PREFETCH, limit)
    raw = [dict(ranking) for ranking in lexical]
    return [
        (point, Parts(fused=min(1.0, _total(scaled) / len(lexical)), **_lexical_fields(raw, scaled, point)))
        for point, scaled in dbsf_parts([ranking[:depth] for ranking in lexical])[:limit]
    ]


def _lexical_fields(
    raw: Sequence[Mapping[PointKey, float]], scaled: Sequence[float | None], point: PointKey
) -> dict[str, float | None]:
    text, context = raw
    return {
        "bm25": text.get(point),
        "bm25_scaled": scaled[0],
        "context": context.get(point),
        "context_scaled": scaled[1],
    }


def explained(
    best: Sequence[tuple[PointKey, Parts]], payloads: Mapping[PointKey, Mapping[str, Any] | None]
) -> list[Explained]:
    """The hits of ``best`` from their stored ``payloads``, each scored by its fused score; a point deleted or
    expired since the rankers read it is left out, as a search leaves it out (``base.fused_items``)."""
    now = time.time()
    hits = []
    for point, parts in best:
        payload = payloads.get(point)
        if payload is None or is_tombstone(payload) or not is_visible(payload, now):
            continue
        item = from_payload(payload, score=parts.fused)
        hits.append(
            Explained(
                item=item,
                fused=parts.fused,
                dense=parts.dense,
                dense_scaled=parts.dense_scaled,
                bm25=parts.bm25,
                bm25_scaled=parts.bm25_scaled,
                context=parts.context,
                context_scaled=parts.context_scaled,
            )
        )
    return hits


def explained_dense(items: Sequence[MemorySetItem]) -> list[Explained]:
    """The hits of a ``dense`` search: no fusion, the cosine is the score."""
    return [Explained(item=item, dense=item.score) for item in items]
