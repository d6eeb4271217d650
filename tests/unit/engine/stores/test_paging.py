"""The browse cursor, the keyset pager against an engine whose ``seq`` bounds go through a float, and DBSF parts."""

from __future__ import annotations

import base64
import json
import math
import random
from collections.abc import Sequence
from typing import Any

import pytest

from memory_core.core.errors import InvalidRequestError
from memory_core.core.messages import MAX_CURSOR_CHARS, BrowseQuery, BrowseSort
from memory_core.core.models import Scope
from memory_core.engine.stores.base import dbsf
from memory_core.engine.stores.paging import (
    SORT_FIELDS,
    Bound,
    Position,
    dbsf_parts,
    decode_cursor,
    encode_cursor,
    exact_page,
    keyset_page,
)

SCOPE = Scope("acme", "user-1", "notes")
SEQ0 = 1_780_000_000_000_000_000


def _pack(body: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(body).encode()).rstrip(b"=").decode()


def _body(cursor: str) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    return decoded


@pytest.mark.parametrize(
    ("sort", "position"),
    [
        ("created", Position(1767225600.123456, SEQ0 + 1, "a")),
        ("updated", Position(None, SEQ0 + 255, "é/ünï code ✓")),
        ("importance", Position(0.5, 0, "x" * 128)),
        ("last_access", Position(0.0, 2**63 - 1, "b")),
        ("expires", Position(1.7e9, 7, "c")),
    ],
)
def test_a_cursor_round_trips_its_place_exactly(sort: BrowseSort, position: Position):
    for descending in (True, False):
        query = BrowseQuery(sort=sort, descending=descending)
        cursor = encode_cursor(SCOPE, query, position)
        assert cursor.isascii()
        assert set(cursor) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        assert decode_cursor(cursor, SCOPE, query) == position


def test_the_longest_cursor_fits_a_request():
    worst = Position(-1.2345678901234567e-300, 2**63 - 1, "\x00" * 128)  # each id character escaped as \u0000
    cursor = encode_cursor(SCOPE, BrowseQuery(sort="last_access", descending=False), worst)
    assert len(cursor) <= MAX_CURSOR_CHARS
    assert decode_cursor(cursor, SCOPE, BrowseQuery(sort="last_access", descending=False)) == worst


def _good() -> str:
    return encode_cursor(SCOPE, BrowseQuery(), Position(1767225600.5, SEQ0, "item-1"))


def _forged(**changes: Any) -> str:
    body = {**_body(_good()), **changes}
    return _pack({k: v for k, v in body.items() if v is not ...})


MALFORMED = {
    "empty": "",
    "not base64url": "abc+/=",
    "spaces": "eyJ2 IjoxfQ",
    "not JSON": base64.urlsafe_b64encode(b"\xff\xfe not json").decode(),
    "a JSON list": _pack([1, 2, 3]),
    "truncated": _good()[:-6],
    "a newer version": _forged(v=2),
    "no place": _forged(k=...),
    "an extra field": _forged(x=1),
    "a seq as text": _forged(k=[1767225600.5, str(SEQ0), "item-1"]),
    "a float seq": _forged(k=[1767225600.5, 1.5, "item-1"]),
    "a negative seq": _forged(k=[1767225600.5, -1, "item-1"]),
    "a bool value": _forged(k=[True, SEQ0, "item-1"]),
    "no value for a created order": _forged(k=[None, SEQ0, "item-1"]),
    "an empty item id": _forged(k=[1767225600.5, SEQ0, ""]),
    "an item id too long": _forged(k=[1767225600.5, SEQ0, "x" * 129]),
    "a numeric direction": _forged(d=1),
    "an unknown sort": _forged(o="size"),
    "a place too short": _forged(k=[1767225600.5, SEQ0]),
    "deep nesting": _pack({"v": 1, "k": [[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]}),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_or_forged_cursor_is_refused_naming_it(case: str):
    cursor = MALFORMED[case]
    with pytest.raises(InvalidRequestError, match="cursor") as refused:
        decode_cursor(cursor, SCOPE, BrowseQuery())
    assert repr(cursor)[:40] in str(refused.value)


def test_a_non_finite_value_is_refused():
    cursor = _pack({**_body(_good()), "k": [0, SEQ0, "i"]})  # an int value is a number too
    assert decode_cursor(cursor, SCOPE, BrowseQuery()).value == 0.0
    nan = base64.urlsafe_b64encode(json.dumps({**_body(_good()), "k": [math.nan, SEQ0, "i"]}).encode()).decode()
    with pytest.raises(InvalidRequestError, match="cursor"):
        decode_cursor(nan.rstrip("="), SCOPE, BrowseQuery())


def test_a_cursor_of_another_set_or_order_is_refused():
    cursor = _good()
    for other in (
        Scope("acme", "user-1", "facts"),
        Scope("acme", "user-2", "notes"),
        Scope("globex", "user-1", "notes"),
    ):
        with pytest.raises(InvalidRequestError, match="another memory set"):
            decode_cursor(cursor, other, BrowseQuery())
    with pytest.raises(InvalidRequestError, match="continues sort 'created' descending, not 'created' ascending"):
        decode_cursor(cursor, SCOPE, BrowseQuery(descending=False))
    with pytest.raises(InvalidRequestError, match="continues sort 'created'"):
        decode_cursor(cursor, SCOPE, BrowseQuery(sort="importance"))
    updated = encode_cursor(SCOPE, BrowseQuery(sort="updated"), Position(None, SEQ0, "i"))
    with pytest.raises(InvalidRequestError, match="holds no place"):
        decode_cursor(_pack({**_body(updated), "k": [1.0, SEQ0, "i"]}), SCOPE, BrowseQuery(sort="updated"))


def test_other_filters_take_the_same_cursor():
    cursor = _good()
    assert decode_cursor(cursor, SCOPE, BrowseQuery(contains="tea", pinned=True)) == Position(
        1767225600.5, SEQ0, "item-1"
    )


# -- the keyset pager -------------------------------------------------------------------------------------------


class FloatBoundEngine:
    """An engine as qdrant-edge 0.9.0 behaves: it orders by a field exactly, but a start bound on an integer field
    goes through a float first, so a nanosecond ``seq`` start moves by up to 128."""

    def __init__(self, payloads: list[dict[str, Any]]) -> None:
        self.payloads = payloads
        self.scrolls = 0

    def scroll(
        self, bounds: Sequence[Bound], order: str, descending: bool, start: int | None, limit: int
    ) -> list[dict[str, Any]]:
        self.scrolls += 1
        found = [p for p in self.payloads if p.get(order) is not None and all(_within(p, b) for b in bounds)]
        if start is not None:
            edge = int(float(start))  # start_from=S+500 acts as S+564 at S ~1.78e18
            found = [p for p in found if (p[order] <= edge if descending else p[order] >= edge)]
        random.Random(len(found)).shuffle(found)  # the engine's order among equal values is its own
        return sorted(found, key=lambda p: p[order], reverse=descending)[:limit]


def _within(payload: dict[str, Any], bound: Bound) -> bool:
    value = payload.get(bound.field)
    if value is None:
        return False
    checks = [
        bound.gte is None or value >= bound.gte,
        bound.gt is None or value > bound.gt,
        bound.lte is None or value <= bound.lte,
        bound.lt is None or value < bound.lt,
    ]
    return all(checks)


def _payloads() -> list[dict[str, Any]]:
    """One add of 600 items (consecutive seqs: a float step holds 256 of them; one creation time), then 160 more."""
    rng = random.Random(7)
    payloads = [
        {
            "item_id": f"a{i:03d}",
            "seq": SEQ0 + i,
            "created_start": 1767225600.0,
            "importance": rng.choice([0.5, 0.5, 0.2, 0.9]),
            "last_accessed_time": 1767225600.0 + rng.randrange(5),
            "expires_at": 1.8e9 + rng.randrange(3) if i % 3 == 0 else None,
        }
        for i in range(600)
    ]
    payloads += [
        {
            "item_id": f"b{i:02d}",
            "seq": SEQ0 + 10_000 + i // 4 * 977,  # fours share a seq (a replay, a summary): their ids order them
            "created_start": 1767225600.0 + i // 3,
            "importance": 0.5,
            "last_accessed_time": 1767225601.0,
            "expires_at": None,
        }
        for i in range(60)
    ]
    payloads += [  # a hundred of one seq: which of them a scroll returns is the engine's choice
        {
            "item_id": f"c{i:02d}",
            "seq": SEQ0 + 500_000,
            "created_start": 1767225700.0,
            "importance": 0.7,
            "last_accessed_time": 1767225602.0,
            "expires_at": None,
        }
        for i in range(100)
    ]
    return payloads


@pytest.mark.parametrize("sort", sorted(SORT_FIELDS))
def test_keyset_pages_walk_as_the_exact_order_through_a_float_start(sort: BrowseSort):
    payloads = _payloads()
    engine = FloatBoundEngine(payloads)
    field = SORT_FIELDS[sort]
    for descending in (True, False):
        for size in (2, 50):
            expected = exact_page(payloads, field, descending, None, 10_000)
            walked: list[dict[str, Any]] = []
            after: Position | None = None
            while True:
                page = keyset_page(engine.scroll, field, descending, after, size)
                walked += page
                if len(page) < size:
                    break
                last = page[-1]
                after = Position(None if field == "seq" else float(last[field]), last["seq"], last["item_id"])
            assert [p["item_id"] for p in walked] == [p["item_id"] for p in expected], (sort, descending, size)


def test_a_page_by_seq_costs_one_scroll_when_writes_are_apart():
    spaced = [{"item_id": f"i{n}", "seq": SEQ0 + n * 1_000_003} for n in range(500)]
    engine = FloatBoundEngine(spaced)
    after = None
    for _ in range(8):
        page = keyset_page(engine.scroll, "seq", True, after, 51)
        after = Position(None, page[-1]["seq"], page[-1]["item_id"])
    assert engine.scrolls == 8


# -- DBSF parts -------------------------------------------------------------------------------------------------


def test_dbsf_parts_sum_to_dbsf_in_the_same_order():
    rng = random.Random(3)
    for _ in range(50):
        rankings = [
            sorted(
                ((f"p{rng.randrange(30)}", rng.random() * 10) for _ in range(rng.randrange(0, 25))), key=lambda p: -p[1]
            )
            for _ in range(3)
        ]
        rankings = [list(dict(r).items()) for r in rankings]  # one score per point and ranking
        parts = dbsf_parts(rankings)
        fused = dbsf(rankings)
        assert [point for point, _ in parts] == [point for point, _ in fused]
        assert [sum(v for v in scaled if v is not None) for _, scaled in parts] == [score for _, score in fused]
        for point, scaled in parts:
            for ranking, value in zip(rankings, scaled, strict=True):
                assert (value is None) == (point not in dict(ranking))
