"""Browsing and explaining, one contract for every store: pages walk a set exactly, filters narrow it alike, and an
explained search is the search, its score taken apart.

The set is written as a client writes it: one add of 320 items with consecutive nanosecond seqs (~1.8e18, where
a float step is 256, so a start bound on ``seq`` cannot be exact) and one creation time, then items added one by
one; with ties on every sort key, tombstones, expired items and a neighbouring set that no page may show.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memory_core.core.errors import InvalidRequestError
from memory_core.core.messages import BrowseQuery, BrowseSort
from memory_core.core.models import ChatMessage, MemorySetItem, MessageRole, Scope, SearchMode
from memory_core.engine.embedders.hashing import HashingEmbedder
from memory_core.engine.stores import ItemRecord, VectorStore
from memory_core.engine.stores.edge import EdgeVectorStore
from memory_core.engine.stores.memory import InMemoryVectorStore
from memory_core.engine.stores.qdrant import QdrantVectorStore

EMBEDDER = HashingEmbedder(dimension=64)
SERVER_URL = os.environ.get("MEMORY_TEST_QDRANT_URL")
SEQ0 = 1_780_000_000_000_000_000  # a client's nanosecond clock
T0 = datetime(2026, 1, 1, tzinfo=UTC)
SCOPE = Scope("ns", "key", "notes")
NEIGHBOUR = Scope("ns", "key", "other")
PLACES = ["Lyon", "Paris", "green tea", "the dentist", "a piano lesson", "Oslo"]
SORTS: tuple[BrowseSort, ...] = ("created", "updated", "importance", "last_access", "expires")


def _open(kind: str, tmp_path: Path) -> VectorStore:
    if kind == "memory":
        return InMemoryVectorStore()
    if kind == "edge":
        return EdgeVectorStore(tmp_path / "edge", collection="browse", dimension=EMBEDDER.dimension)
    url = ":memory:" if kind == "qdrant_local" else SERVER_URL
    assert url is not None
    collection = "browse" if kind == "qdrant_local" else f"browse_{tmp_path.name}"
    return QdrantVectorStore.connect(url, api_key=None, timeout=5, collection=collection, dimension=EMBEDDER.dimension)


@pytest.fixture(
    params=[
        "memory",
        "edge",
        "qdrant_local",
        pytest.param(
            "qdrant_server",
            marks=[
                pytest.mark.qdrant_server,
                pytest.mark.skipif(SERVER_URL is None, reason="MEMORY_TEST_QDRANT_URL is not set"),
            ],
        ),
    ]
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    opened = _open(request.param, tmp_path)
    yield opened
    opened.close()


def _item(scope: Scope, item_id: str, value: str | ChatMessage, created: datetime, **extra: Any) -> MemorySetItem:
    fields: dict[str, Any] = {
        "memory_set_name": scope.set_name,
        "id": item_id,
        "value": value,
        "created_time": created,
        "last_accessed_time": created,
    }
    return MemorySetItem.model_validate({**fields, **extra})


def _batch(now: datetime) -> list[ItemRecord]:
    """One add of 320 items (consecutive seqs, one creation time), then 40 added one by one."""
    records = []
    for i in range(320):
        text = f"Note {i} about {PLACES[i % len(PLACES)]}"
        value: str | ChatMessage = ChatMessage(role=MessageRole.USER, content=text) if i % 9 == 0 else text
        item = _item(
            SCOPE,
            f"a{i:03d}",
            value,
            T0,
            last_accessed_time=T0 + timedelta(seconds=i % 7),
            importance=[0.5, 0.5, 0.2, 0.9, 0.5][i % 5],
            pinned=i % 10 == 3,
            expires_at=now + timedelta(days=1 + i % 3) if i % 4 == 0 else None,
            compacted=i % 25 == 1,
            compacted_from=[f"old-{i}-1", f"old-{i}-2"] if i % 25 == 1 else [],
            additional_metadata={"tag": f"t{i % 3}", "n": i % 4},
        )
        records.append(ItemRecord(item=item, seq=SEQ0 + i, vector=EMBEDDER.embed([text])[0]))
    for i in range(40):
        text = f"Later note {i} about {PLACES[i % len(PLACES)]}"
        created = T0 + timedelta(hours=1 + i // 2)  # pairs share a creation time
        item = _item(SCOPE, f"b{i:02d}", text, created, importance=0.5, additional_metadata={"tag": "t1", "n": 9})
        records.append(ItemRecord(item=item, seq=SEQ0 + 1_000_000 + i * 1_000_003, vector=EMBEDDER.embed([text])[0]))
    return records


def _fill(store: VectorStore) -> list[MemorySetItem]:
    """Writes the set (and what no page may show); returns its visible items, each with its seq."""
    now = datetime.now(UTC).replace(microsecond=0)  # whole seconds: a time read back equals the one written
    records = _batch(now)
    store.upsert(SCOPE, records)
    hidden = [
        ItemRecord(
            item=_item(SCOPE, f"x{i}", f"expired note {i} about Lyon", T0, expires_at=T0),
            seq=SEQ0 + 500 + i,
            vector=[1.0] * 64,
        )
        for i in range(3)
    ]
    kept = ItemRecord(
        item=_item(SCOPE, "kept", "pinned past its expiry, about Lyon", T0, expires_at=T0, pinned=True),
        seq=SEQ0 + 600,
        vector=[1.0] * 64,
    )
    store.upsert(SCOPE, [*hidden, kept])
    store.upsert(
        NEIGHBOUR, [ItemRecord(item=_item(NEIGHBOUR, "n1", "a note about Lyon", T0), seq=SEQ0 + 1, vector=[1.0] * 64)]
    )
    deleted = {"a007": SEQ0 + 2_000_000_000, "b03": SEQ0 + 2_000_000_000}
    store.delete(SCOPE, deleted)
    written = [r for r in [*records, kept] if r.item.id not in deleted]
    return [r.item.model_copy(update={"seq": r.seq}) for r in written]


def _created(item: MemorySetItem) -> float:
    created = item.created_time if isinstance(item.created_time, datetime) else item.created_time.start
    return created.timestamp()


def _value(item: MemorySetItem, sort: BrowseSort) -> float | None:
    values = {
        "created": _created(item),
        "updated": 0.0,
        "importance": item.importance,
        "last_access": item.last_accessed_time.timestamp(),
        "expires": None if item.expires_at is None else item.expires_at.timestamp(),
    }
    return values[sort]


def _expected(items: list[MemorySetItem], sort: BrowseSort, descending: bool) -> list[str]:
    keyed = [(value, i.seq or 0, i.id) for i in items if (value := _value(i, sort)) is not None]
    return [item_id for _, _, item_id in sorted(keyed, reverse=descending)]


def _walk(store: VectorStore, query: BrowseQuery, limit: int) -> list[str]:
    """Every page of the set for ``query``, checking each page's size; the ids in order."""
    seen: list[str] = []
    cursor: str | None = None
    while True:
        items, cursor = store.page_items(SCOPE, query, cursor, limit)
        seen += [item.id for item in items]
        if cursor is None:
            assert len(items) <= limit
            return seen
        assert len(items) == limit  # a cursor only after a full page, and never to an empty one
        assert len(seen) < 2_000, "paging does not end"


@pytest.mark.parametrize("sort", SORTS)
def test_pages_walk_the_set_once_in_order_both_ways_for_every_sort(store: VectorStore, sort: BrowseSort):
    visible = _fill(store)
    for descending in (True, False):
        query = BrowseQuery(sort=sort, descending=descending)
        expected = _expected(visible, sort, descending)
        assert _walk(store, query, 7) == expected, (sort, descending)
        assert store.count_matching(SCOPE, query) == len(expected)
    assert len(_expected(visible, sort, True)) > (80 if sort == "expires" else 350)  # the walk crossed many ties


def test_a_page_reads_the_items_whole(store: VectorStore):
    visible = {item.id: item for item in _fill(store)}
    items, _ = store.page_items(SCOPE, BrowseQuery(sort="updated", descending=False), None, 30)
    assert items == [visible[item.id] for item in items]  # every field as written, seq included
    assert all(item.score is None for item in items)


def _words(text: str) -> set[str]:
    return {word.lower() for word in text.replace(",", " ").split()}


def _text(item: MemorySetItem) -> str:
    return item.value if isinstance(item.value, str) else item.value.content


FILTERS: list[tuple[dict[str, Any], Callable[[MemorySetItem], bool]]] = [
    ({"contains": "lyon"}, lambda i: "lyon" in _words(_text(i))),
    ({"contains": "GREEN Tea"}, lambda i: {"green", "tea"} <= _words(_text(i))),
    ({"contains": "note 9"}, lambda i: {"note", "9"} <= _words(_text(i))),  # a chat message's content too
    ({"contains": "tea Oslo"}, lambda i: False),
    ({"metadata": {"tag": "t1"}}, lambda i: i.additional_metadata.get("tag") == "t1"),
    ({"metadata": {"n": 2}}, lambda i: i.additional_metadata.get("n") == 2),
    ({"metadata": {"n": "2"}}, lambda i: False),  # typed: the str "2" is not the int 2
    (
        {"metadata": {"tag": ["t0", "t2"], "n": 1}},
        lambda i: i.additional_metadata.get("tag") in ("t0", "t2") and i.additional_metadata.get("n") == 1,
    ),
    ({"created_after": T0 + timedelta(hours=3)}, lambda i: _created(i) >= (T0 + timedelta(hours=3)).timestamp()),
    ({"created_before": T0 + timedelta(hours=3)}, lambda i: _created(i) < (T0 + timedelta(hours=3)).timestamp()),
    ({"compacted": True}, lambda i: bool(i.compacted_from)),
    ({"compacted": False}, lambda i: not i.compacted_from),
    ({"pinned": True}, lambda i: i.pinned),
    ({"pinned": False}, lambda i: not i.pinned),
    ({"min_importance": 0.5}, lambda i: i.importance >= 0.5),
    ({"max_importance": 0.2}, lambda i: i.importance <= 0.2),
    ({"min_importance": 0.5, "max_importance": 0.5}, lambda i: i.importance == 0.5),
    ({"expiring": True}, lambda i: i.expires_at is not None),
    ({"expiring": False}, lambda i: i.expires_at is None),
    (
        {"contains": "lyon", "compacted": False, "min_importance": 0.5, "metadata": {"tag": "t0"}},
        lambda i: (
            "lyon" in _words(_text(i))
            and not i.compacted_from
            and i.importance >= 0.5
            and i.additional_metadata.get("tag") == "t0"
        ),
    ),
]


@pytest.mark.timeout(300)  # every filter over every store; qdrant-client's local mode scans in Python
def test_every_filter_lists_exactly_its_items_and_counts_them(store: VectorStore):
    visible = _fill(store)
    for fields, wanted in FILTERS:
        for sort in ("created", "importance"):
            query = BrowseQuery.model_validate({"sort": sort, **fields})
            expected = _expected([i for i in visible if wanted(i)], query.sort, True)
            assert _walk(store, query, 9) == expected, (fields, sort)
            assert store.count_matching(SCOPE, query) == len(expected), fields
    assert any(wanted(i) for i in visible for fields, wanted in FILTERS[:1])  # the text filter finds something


def test_expiry_order_with_items_without_expiry_is_empty_not_wrong(store: VectorStore):
    _fill(store)
    query = BrowseQuery(sort="expires", expiring=False)
    assert store.page_items(SCOPE, query, None, 10) == ([], None)
    assert store.count_matching(SCOPE, query) == 0


def test_a_cursor_is_refused_by_another_set_and_another_order(store: VectorStore):
    _fill(store)
    query = BrowseQuery()
    _, cursor = store.page_items(SCOPE, query, None, 5)
    assert cursor is not None
    with pytest.raises(InvalidRequestError, match="another memory set"):
        store.page_items(NEIGHBOUR, query, cursor, 5)
    with pytest.raises(InvalidRequestError, match="another memory set"):
        store.page_items(Scope("other-ns", "key", "notes"), query, cursor, 5)
    with pytest.raises(InvalidRequestError, match="continues sort 'created' descending"):
        store.page_items(SCOPE, BrowseQuery(descending=False), cursor, 5)
    with pytest.raises(InvalidRequestError, match="not a browse cursor"):
        store.page_items(SCOPE, query, cursor[:-4], 5)
    # Another filter keeps the place: the cursor is a place in the order, not in one listing.
    items, _ = store.page_items(SCOPE, BrowseQuery(pinned=False), cursor, 5)
    assert len(items) == 5


def test_a_page_is_stable_under_writes_before_its_place(store: VectorStore):
    _fill(store)
    query = BrowseQuery(sort="updated")
    _first, cursor = store.page_items(SCOPE, query, None, 10)
    following, _ = store.page_items(SCOPE, query, cursor, 10)
    newer = _item(SCOPE, "newest", "written after the first page was read", T0 + timedelta(days=1))
    store.upsert(SCOPE, [ItemRecord(item=newer, seq=SEQ0 + 3_000_000_000, vector=[1.0] * 64)])
    again, _ = store.page_items(SCOPE, query, cursor, 10)
    assert again == following
    assert store.page_items(SCOPE, query, None, 1)[0][0].id == "newest"


# -- explain ----------------------------------------------------------------------------------------------------

LINES = [
    "Alice moved to Lyon in May",
    "Bob prefers green tea in the morning",
    "the dentist appointment is on Friday",
    "Carol plays the piano every Sunday",
    "Alice and Bob met in Paris",
    "green tea and a piano lesson",
    "Friday is the day of the board meeting",
    "Dave travels to Oslo for work",
]
QUERIES = ["Alice in Lyon", "green tea", "what did Carol play", "Friday dentist", "Oslo"]


def _talk(store: VectorStore) -> None:
    texts = [f"{line} ({n})" for n in range(6) for line in LINES]
    vectors = EMBEDDER.embed(texts)
    store.upsert(
        SCOPE,
        [
            ItemRecord(item=_item(SCOPE, f"t{n}", text, T0), seq=SEQ0 + n, vector=vector)
            for n, (text, vector) in enumerate(zip(texts, vectors, strict=True))
        ],
        context_window=2,
    )


@pytest.mark.parametrize("mode", ["hybrid", "dense", "lexical"])
def test_an_explained_search_is_the_search_with_its_parts(store: VectorStore, mode: SearchMode):
    _talk(store)
    # The engines fuse a lexical search themselves (the same DBSF, another order among equal scores), and local
    # mode's cosines differ in the last bits from one query to the next.
    engine_fused = mode == "lexical" and not isinstance(store, InMemoryVectorStore)
    noise = 1e-5 if engine_fused else 1e-6 if isinstance(store, QdrantVectorStore) else 0
    for text in QUERIES:
        vector = EMBEDDER.embed([text])[0]
        hits = store.search(SCOPE, vector, 10, {}, text=text, mode=mode)
        explained = store.explain(SCOPE, vector, 10, {}, text=text, mode=mode)
        assert hits, text
        assert [e.item.score for e in explained] == pytest.approx([h.score for h in hits], abs=noise)
        if noise == 0:
            assert [e.item for e in explained] == hits, text
        else:  # all but the hits tied at the cut
            above = {h.id for h in hits if (h.score or 0) > (hits[-1].score or 0) + 1e-5}
            assert above <= {e.item.id for e in explained}, text
            found = {h.id: h for h in hits}
            for e in explained:
                if e.item.id in found:
                    assert e.item.score == pytest.approx(found[e.item.id].score, abs=noise)
                    assert e.item.model_copy(update={"score": None}) == found[e.item.id].model_copy(
                        update={"score": None}
                    )
        for e in explained:
            _check_parts(e, mode)


def _check_parts(explained: Any, mode: str) -> None:
    parts = [explained.dense_scaled, explained.bm25_scaled, explained.context_scaled]
    if mode == "dense":
        assert explained.fused is None
        assert explained.dense == explained.item.score
        assert parts == [None, None, None]
        return
    rankers = 3 if mode == "hybrid" else 2
    assert explained.fused == pytest.approx(min(1.0, sum(p for p in parts if p is not None) / rankers))
    assert explained.item.score == explained.fused
    assert (explained.bm25 is None) == (explained.bm25_scaled is None)
    assert (explained.context is None) == (explained.context_scaled is None)
    assert explained.bm25 is not None or explained.context is not None or mode == "hybrid"
    if mode == "hybrid":
        assert explained.dense is not None  # every hybrid hit's cosine is known
    else:
        assert explained.dense is None
        assert explained.dense_scaled is None
    assert explained.rerank is None


def test_explain_keeps_the_searchs_filters_and_leaves_superseded_facts_out(store: VectorStore):
    _talk(store)
    store.set_fields(SCOPE, ["t1"], {"superseded": 1})
    store.set_fields(SCOPE, ["t9"], {"metadata": {"kept": "yes"}})
    vector = EMBEDDER.embed(["green tea"])[0]
    ids = [e.item.id for e in store.explain(SCOPE, vector, 10, {}, text="green tea")]
    assert "t1" not in ids
    assert "t1" in [e.item.id for e in store.explain(SCOPE, vector, 50, {}, text="green tea", include_superseded=True)]
    assert [e.item.id for e in store.explain(SCOPE, vector, 10, {"kept": "yes"}, text="green tea")] == ["t9"]


# -- indexes ----------------------------------------------------------------------------------------------------


def test_an_embedded_store_of_before_browsing_gets_its_indexes_on_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import memory_core.engine.stores.edge as edge_module
    from memory_core.engine.stores.base import ITEM_INDEX_FIELDS, NUMERIC_INDEX_FIELDS

    new = {"created_start", "compacted_from", "value", "value.content"}
    with monkeypatch.context() as earlier:
        earlier.setattr(edge_module, "ITEM_INDEX_FIELDS", tuple(f for f in ITEM_INDEX_FIELDS if f not in new))
        earlier.setattr(edge_module, "NUMERIC_INDEX_FIELDS", tuple(f for f in NUMERIC_INDEX_FIELDS if f not in new))
        earlier.setattr(edge_module, "TEXT_INDEX_FIELDS", ())
        old = _open("edge", tmp_path)
        assert isinstance(old, EdgeVectorStore)
        visible = _fill(old)
        assert not new & set(old._items.info().payload_schema)
        old.close()
    store = _open("edge", tmp_path)
    try:
        assert isinstance(store, EdgeVectorStore)
        assert new <= set(store._items.info().payload_schema)
        query = BrowseQuery(contains="Lyon", compacted=False, created_after=T0)
        expected = _expected(
            [i for i in visible if "lyon" in _words(_text(i)) and not i.compacted_from], "created", True
        )
        assert _walk(store, query, 10) == expected
        assert _walk(store, BrowseQuery(sort="created", descending=False), 50) == _expected(visible, "created", False)
    finally:
        store.close()
