"""One contract, every store: memory, the embedded Edge engine, qdrant-client (local mode, and a server if given).

Like qdrant-client's congruence tests: each adapter must give the same answers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memory_core.embedders.hashing import HashingEmbedder
from memory_core.models import DatetimeRange, MemorySet, MemorySetItem, Scope
from memory_core.stores import ItemRecord, VectorStore
from memory_core.stores.base import text_hash
from memory_core.stores.edge import EdgeVectorStore
from memory_core.stores.memory import InMemoryVectorStore
from memory_core.stores.qdrant import QdrantVectorStore

EMBEDDER = HashingEmbedder(dimension=64)
SERVER_URL = os.environ.get("MEMORY_TEST_QDRANT_URL")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _open(kind: str, tmp_path: Path) -> VectorStore:
    if kind == "memory":
        return InMemoryVectorStore()
    if kind == "edge":
        return EdgeVectorStore(tmp_path / "edge", collection="contract", dimension=EMBEDDER.dimension)
    if kind == "qdrant_local":
        return QdrantVectorStore.connect(
            ":memory:", api_key=None, timeout=5, collection="contract", dimension=EMBEDDER.dimension
        )
    assert SERVER_URL is not None
    return QdrantVectorStore.connect(
        SERVER_URL, api_key=None, timeout=5, collection=f"contract_{tmp_path.name}", dimension=EMBEDDER.dimension
    )


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
    s = _open(request.param, tmp_path)
    yield s
    s.close()


SCOPE = Scope("ns", "key", "notes")


def _record(item_id: str, text: str, seq: int, **extra: object) -> ItemRecord:
    fields: dict[str, object] = {
        "memory_set_name": "notes",
        "id": item_id,
        "value": text,
        "created_time": T0 + timedelta(seconds=seq),
        "last_accessed_time": T0 + timedelta(seconds=seq),
    }
    fields.update(extra)
    item = MemorySetItem.model_validate(fields)
    return ItemRecord(item=item, seq=seq, vector=EMBEDDER.embed([text])[0])


def test_upsert_then_read_back_in_insertion_order(store: VectorStore):
    store.upsert(SCOPE, [_record("b", "second", 2), _record("a", "first", 1), _record("c", "third", 3)])
    assert [i.id for i in store.list_items(SCOPE)] == ["a", "b", "c"]
    assert [i.value for i in store.retrieve(SCOPE, ["c", "a", "missing"])] == ["first", "third"]
    assert store.count(SCOPE) == 3


def test_items_round_trip_every_field(store: VectorStore):
    summary = _record(
        "s",
        "a summary",
        5,
        compacted=True,
        created_time=DatetimeRange(start=T0, end=T0 + timedelta(days=1)),
        additional_metadata={"source": "crm", "tags": ["a", "b"], "n": 3},
        importance=0.9,
        source="crm",
        pinned=True,
        expires_at=T0,
    )
    store.upsert(SCOPE, [summary])
    (item,) = store.retrieve(SCOPE, ["s"])
    assert item == summary.item.model_copy(update={"seq": 5})


def test_upserting_the_same_id_twice_keeps_one_point(store: VectorStore):
    store.upsert(SCOPE, [_record("a", "v1", 1)])
    store.upsert(SCOPE, [_record("a", "v2", 2)])
    assert [i.value for i in store.list_items(SCOPE)] == ["v2"]
    assert store.count(SCOPE) == 1


def test_scopes_are_disjoint_even_with_equal_item_ids(store: VectorStore):
    others = [Scope("ns2", "key", "notes"), Scope("ns", "key2", "notes"), Scope("ns", "key", "other")]
    store.upsert(SCOPE, [_record("a", "mine", 1)])
    for scope in others:
        store.upsert(scope, [_record("a", f"theirs {scope}", 1)])
    assert [i.value for i in store.list_items(SCOPE)] == ["mine"]
    assert [i.value for i in store.search(SCOPE, EMBEDDER.embed(["theirs"])[0], 10, {})] == ["mine"]
    store.delete(SCOPE, None)
    assert store.count(SCOPE) == 0
    assert all(store.count(scope) == 1 for scope in others)


def test_search_is_best_first_and_honours_filters(store: VectorStore):
    store.upsert(
        SCOPE,
        [
            _record("1", "green tea every morning", 1, additional_metadata={"source": "chat"}),
            _record("2", "green tea", 2, additional_metadata={"source": "crm"}),
            _record("3", "flight to tokyo", 3, additional_metadata={"source": "chat", "n": 1}),
        ],
    )
    query = EMBEDDER.embed(["green tea"])[0]
    hits = store.search(SCOPE, query, 3, {})
    assert hits[0].id == "2"
    assert all(h.score is not None for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)  # type: ignore[type-var]
    assert [h.id for h in store.search(SCOPE, query, 3, {"source": "chat"})] == ["1", "3"]
    assert [h.id for h in store.search(SCOPE, query, 3, {"source": ["crm", "nope"]})] == ["2"]
    assert [h.id for h in store.search(SCOPE, query, 3, {"n": 1})] == ["3"]
    assert store.search(SCOPE, query, 3, {"source": "nothing"}) == []
    assert len(store.search(SCOPE, query, 1, {})) == 1


def test_delete_by_ids_ignores_missing_ones(store: VectorStore):
    store.upsert(SCOPE, [_record("a", "x", 1), _record("b", "y", 2)])
    store.delete(SCOPE, ["a", "missing"])
    assert [i.id for i in store.list_items(SCOPE)] == ["b"]


def test_listing_pages_through_large_sets(store: VectorStore):
    store.upsert(SCOPE, [_record(str(i), f"item {i}", i) for i in range(2_345)])
    items = store.list_items(SCOPE)
    assert [i.id for i in items] == [str(i) for i in range(2_345)]


def test_set_definitions_are_stored_per_namespace_and_key(store: VectorStore):
    definition = MemorySet(name="notes", capacity=7)
    store.put_set("ns", "key", definition)
    assert store.get_set("ns", "key", "notes") == definition
    assert store.get_set("ns2", "key", "notes") is None
    assert store.get_set("ns", "key2", "notes") is None
    assert store.delete_set("ns", "key", "notes") is True
    assert store.delete_set("ns", "key", "notes") is False
    assert store.get_set("ns", "key", "notes") is None


def test_the_sets_of_a_key_are_listed_by_name_and_no_others(store: VectorStore):
    for namespace, key, name in [("ns", "k", "b"), ("ns", "k", "a"), ("ns", "k2", "c"), ("ns2", "k", "d")]:
        store.put_set(namespace, key, MemorySet(name=name))
    assert [d.name for d in store.sets_of("ns", "k")] == ["a", "b"]
    assert [d.name for d in store.sets_of("ns2", "k")] == ["d"]
    assert store.sets_of("ns3", "k") == []


def test_the_embedded_engine_keeps_data_across_reopen(tmp_path: Path):
    first = EdgeVectorStore(tmp_path, collection="c", dimension=EMBEDDER.dimension)
    first.upsert(SCOPE, [_record("a", "persisted", 1)])
    first.put_set("ns", "key", MemorySet(name="notes"))
    first.close()
    second = EdgeVectorStore(tmp_path, collection="c", dimension=EMBEDDER.dimension)
    try:
        assert [i.value for i in second.list_items(SCOPE)] == ["persisted"]
        assert second.get_set("ns", "key", "notes") == MemorySet(name="notes")
    finally:
        second.close()


def test_the_embedded_engine_refuses_a_second_owner(tmp_path: Path):
    from memory_core.errors import StoreError

    owner = EdgeVectorStore(tmp_path, collection="c", dimension=EMBEDDER.dimension)
    try:
        with pytest.raises(StoreError, match="WAL"):
            EdgeVectorStore(tmp_path, collection="c", dimension=EMBEDDER.dimension)
    finally:
        owner.close()


def test_expired_items_are_invisible_to_every_read_unless_pinned(store: VectorStore):
    past, future = datetime.now(UTC) - timedelta(seconds=1), datetime.now(UTC) + timedelta(hours=1)
    store.upsert(
        SCOPE,
        [
            _record("gone", "green tea", 1, expires_at=past),
            _record("pinned", "green tea", 2, expires_at=past, pinned=True),
            _record("later", "green tea", 3, expires_at=future),
            _record("forever", "green tea", 4),
        ],
    )
    visible = ["pinned", "later", "forever"]
    assert [i.id for i in store.list_items(SCOPE)] == visible
    assert [i.id for i in store.retrieve(SCOPE, ["gone", "pinned"])] == ["pinned"]
    assert sorted(i.id for i in store.search(SCOPE, EMBEDDER.embed(["green tea"])[0], 10, {})) == sorted(visible)
    assert store.count(SCOPE) == 3
    assert store.expired(datetime.now(UTC).timestamp(), 10) == [(SCOPE, "gone")]
    assert store.find_by_text_hash(SCOPE, [text_hash("GREEN  tea")])[text_hash("green tea")].id in visible


def test_set_fields_updates_payload_in_place(store: VectorStore):
    store.upsert(SCOPE, [_record("a", "x", 1), _record("b", "y", 2)])
    store.set_fields(SCOPE, ["a", "missing"], {"last_accessed_time": T0.timestamp() + 99, "metadata": {"k": 1}})
    a, b = store.list_items(SCOPE)
    assert a.last_accessed_time == T0 + timedelta(seconds=99)
    assert a.additional_metadata == {"k": 1}
    assert b.last_accessed_time == T0 + timedelta(seconds=2)


def test_delete_expired_is_bounded_and_spares_pinned_and_live_items(store: VectorStore):
    past = datetime.now(UTC) - timedelta(seconds=1)
    store.upsert(SCOPE, [_record(f"e{i}", f"old {i}", i, expires_at=past) for i in range(5)])
    store.upsert(SCOPE, [_record("p", "pinned", 10, expires_at=past, pinned=True), _record("live", "live", 11)])
    now = datetime.now(UTC).timestamp()
    assert store.delete_expired(now, 3) == 3
    assert store.delete_expired(now, 3) == 2
    assert store.delete_expired(now, 3) == 0
    assert store.expired(now, 10) == []
    assert sorted(i.id for i in store.list_items(SCOPE)) == ["live", "p"]


def test_forget_removes_a_key_or_a_whole_namespace_and_nothing_else(store: VectorStore):
    keep = Scope("other", "key", "notes")
    for scope in (SCOPE, Scope("ns", "key", "more"), Scope("ns", "key2", "notes"), keep):
        store.upsert(scope, [_record("a", "x", 1)])
        store.put_set(scope.namespace, scope.key, MemorySet(name=scope.set_name))
    items, sets = store.forget("ns", "key")
    assert (items, sorted(sets)) == (2, ["key:more", "key:notes"])
    assert store.count(SCOPE) == 0
    assert store.get_set("ns", "key", "notes") is None
    assert store.count(Scope("ns", "key2", "notes")) == 1
    assert store.forget("ns", None) == (1, ["key2:notes"])
    assert store.count(keep) == 1
    assert store.get_set("other", "key", "notes") is not None
