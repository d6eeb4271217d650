"""One contract, every store: memory, the embedded Edge engine, qdrant-client (local mode, and a server if given).

Like qdrant-client's congruence tests: each adapter must give the same answers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memory_core.core.errors import ConfigurationError, StoreError
from memory_core.core.models import DatetimeRange, FactEvent, FactInfo, MemorySet, MemorySetItem, Scope, SearchMode
from memory_core.core.settings import QdrantSettings
from memory_core.engine.embedders.hashing import HashingEmbedder
from memory_core.engine.stores import ItemRecord, VectorStore
from memory_core.engine.stores.base import TOMBSTONE_TTL, text_hash
from memory_core.engine.stores.edge import EdgeVectorStore
from memory_core.engine.stores.memory import InMemoryVectorStore
from memory_core.engine.stores.qdrant import QdrantVectorStore

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
        "created_time": T0 + timedelta(seconds=seq % 100_000),
        "last_accessed_time": T0 + timedelta(seconds=seq % 100_000),
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


def test_an_older_or_replayed_write_never_replaces_a_newer_one(store: VectorStore):
    store.upsert(SCOPE, [_record("a", "new", 20, additional_metadata={"v": 2})])
    store.upsert(SCOPE, [_record("a", "old", 10, additional_metadata={"v": 1})])  # a late, older write
    store.upsert(SCOPE, [_record("a", "same seq, other value", 20)])  # a replay carries the same seq
    (item,) = store.list_items(SCOPE)
    assert (item.value, item.additional_metadata, item.seq) == ("new", {"v": 2}, 20)


def test_one_batch_is_checked_point_by_point(store: VectorStore):
    store.upsert(SCOPE, [_record("newer", "kept", 50), _record("older", "replaced", 5)])
    store.upsert(SCOPE, [_record("newer", "stale", 40), _record("older", "fresh", 45), _record("new", "added", 46)])
    assert {i.id: i.value for i in store.list_items(SCOPE)} == {"newer": "kept", "older": "fresh", "new": "added"}


def test_a_delete_leaves_a_tombstone_that_refuses_older_writes_only(store: VectorStore):
    store.upsert(SCOPE, [_record("a", "secret", 10), _record("b", "stays", 11)])
    store.delete(SCOPE, {"a": 15})
    store.upsert(SCOPE, [_record("a", "secret", 10)])  # the acknowledged add, redelivered
    store.upsert(SCOPE, [_record("a", "secret", 15)])  # as old as the delete: still refused
    assert [i.id for i in store.list_items(SCOPE)] == ["b"]
    store.upsert(SCOPE, [_record("a", "written again", 16)])  # a write issued after the delete
    assert {i.id: i.value for i in store.list_items(SCOPE)} == {"a": "written again", "b": "stays"}


def test_a_delete_issued_before_a_newer_write_leaves_it(store: VectorStore):
    store.upsert(SCOPE, [_record("a", "newer than the delete", 30)])
    store.delete(SCOPE, {"a": 20, "never-written": 20})
    assert [i.value for i in store.list_items(SCOPE)] == ["newer than the delete"]
    store.upsert(SCOPE, [_record("never-written", "late add", 19)])  # issued before the delete of its id
    assert [i.id for i in store.list_items(SCOPE)] == ["a"]


def test_seq_is_compared_exactly_at_the_magnitude_of_nanoseconds(store: VectorStore):
    # Real seqs are nanoseconds since the epoch (~1.8e18): a float holds them to 256 ns only.
    t = 1_795_493_355_592_605_503
    store.upsert(SCOPE, [_record("a", "newer by 1 ns", t + 1)])
    store.upsert(SCOPE, [_record("a", "older by 1 ns", t)])
    assert [i.value for i in store.list_items(SCOPE)] == ["newer by 1 ns"]
    store.delete(SCOPE, {"a": t})  # issued 1 ns before the item's write
    assert store.count(SCOPE) == 1
    store.delete(SCOPE, {"a": t + 1})  # the very version it read (compaction, eviction)
    assert store.count(SCOPE) == 0
    store.upsert(SCOPE, [_record("a", "as old as the delete", t + 1)])
    assert store.count(SCOPE) == 0
    store.upsert(SCOPE, [_record("a", "after the delete by 1 ns", t + 2)])
    assert [i.value for i in store.list_items(SCOPE)] == ["after the delete by 1 ns"]


def test_tombstones_are_invisible_to_every_read(store: VectorStore):
    store.upsert(SCOPE, [_record("gone", "green tea", 1), _record("kept", "black coffee", 2)])
    store.delete(SCOPE, {"gone": 3})
    store.upsert(SCOPE, [_record("later", "green tea again", 4)], context_window=2)  # context skips the tombstone
    query = EMBEDDER.embed(["green tea"])[0]
    assert store.retrieve(SCOPE, ["gone"]) == []
    assert [i.id for i in store.list_items(SCOPE)] == ["kept", "later"]
    assert store.count(SCOPE) == 2
    for mode in ("dense", "lexical", "hybrid"):
        assert "gone" not in [h.id for h in store.search(SCOPE, query, 10, {}, text="green tea", mode=mode)]
    assert store.find_by_text_hash(SCOPE, [text_hash("green tea")]) == {}
    assert store.expired(datetime.now(UTC).timestamp(), 10) == []
    assert store.item_vectors(SCOPE, ["gone", "kept"]).keys() == {"kept"}
    assert store.item_versions(SCOPE) == {"kept": 2, "later": 4}


def test_the_ttl_sweep_removes_a_tombstone_only_after_its_time(store: VectorStore):
    store.upsert(SCOPE, [_record("a", "x", 1)])
    store.delete(SCOPE, {"a": 2})
    now = datetime.now(UTC).timestamp()
    assert store.delete_expired(now, 10) == 0
    store.upsert(SCOPE, [_record("a", "x", 1)])
    assert store.list_items(SCOPE) == []
    assert store.delete_expired(now + TOMBSTONE_TTL + 60, 10) == 1
    store.upsert(SCOPE, [_record("a", "x", 1)])  # past the window the id is free again
    assert [i.id for i in store.list_items(SCOPE)] == ["a"]


def test_set_fields_with_a_seq_touches_only_that_version(store: VectorStore):
    store.upsert(SCOPE, [_record("a", "x", 5), _record("b", "y", 6)])
    store.delete(SCOPE, {"b": 7})
    store.set_fields(SCOPE, ["a"], {"metadata": {"k": "stale"}}, seq=4)
    store.set_fields(SCOPE, ["a"], {"metadata": {"k": "this"}}, seq=5)
    store.set_fields(SCOPE, ["b"], {"metadata": {"k": "on a tombstone"}})
    assert [(i.id, i.additional_metadata) for i in store.list_items(SCOPE)] == [("a", {"k": "this"})]
    store.upsert(SCOPE, [_record("b", "y", 6)])  # the tombstone is still whole
    assert [i.id for i in store.list_items(SCOPE)] == ["a"]


def test_scopes_are_disjoint_even_with_equal_item_ids(store: VectorStore):
    others = [Scope("ns2", "key", "notes"), Scope("ns", "key2", "notes"), Scope("ns", "key", "other")]
    store.upsert(SCOPE, [_record("a", "mine", 1)])
    for scope in others:
        store.upsert(scope, [_record("a", f"theirs {scope}", 1)])
    assert [i.value for i in store.list_items(SCOPE)] == ["mine"]
    assert [i.value for i in store.search(SCOPE, EMBEDDER.embed(["theirs"])[0], 10, {})] == ["mine"]
    store.delete(SCOPE, dict.fromkeys(store.item_versions(SCOPE), 10))
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
    store.delete(SCOPE, {"a": 10, "missing": 10})
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


def test_the_embedded_engine_opens_a_float32_store_of_an_earlier_version(tmp_path: Path):
    import qdrant_edge as qe

    from memory_core.engine.stores.base import SPARSE_NAMES
    from memory_core.engine.stores.edge import DENSE

    # How collections were created before float16 became the default; the engine refuses to open
    # a shard under a different vector datatype, so the store must open it as it is.
    old = qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=EMBEDDER.dimension, distance=qe.Distance.Cosine)},
        sparse_vectors={n: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf) for n in SPARSE_NAMES},
    )
    (tmp_path / "c").mkdir()
    qe.EdgeShard.create(str(tmp_path / "c"), old).close()
    store = EdgeVectorStore(tmp_path, collection="c", dimension=EMBEDDER.dimension)
    try:
        store.upsert(SCOPE, [_record("a", "green tea", 1), _record("b", "flight to Tokyo", 2)])
        (vector,) = EMBEDDER.embed(["green tea"])
        assert [i.id for i in store.search(SCOPE, vector, 1, {}, text="green tea", mode="hybrid")] == ["a"]
        assert store.item_vectors(SCOPE, ["a"])["a"] == pytest.approx(vector, abs=1e-6)  # still float32
    finally:
        store.close()


def test_the_embedded_engine_refuses_a_second_owner_naming_the_first(tmp_path: Path):
    from memory_core.core.errors import ConfigurationError

    owner = EdgeVectorStore(tmp_path, collection="c", dimension=EMBEDDER.dimension)
    try:
        with pytest.raises(ConfigurationError, match=f"{tmp_path.resolve()} is in use by pid {os.getpid()} "):
            EdgeVectorStore(tmp_path, collection="c", dimension=EMBEDDER.dimension)
    finally:
        owner.close()
    EdgeVectorStore(tmp_path, collection="c", dimension=EMBEDDER.dimension).close()  # closing released it


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


# -- lexical and hybrid search ------------------------------------------------------------

BIG_SEQ = 1_763_866_000_123_456_789  # a real nanosecond seq: beyond float precision, as in production


def _talk(store: VectorStore, scope: Scope, lines: list[str], first_seq: int, window: int) -> None:
    records = [_record(f"t{first_seq + i}", line, first_seq + i) for i, line in enumerate(lines)]
    store.upsert(scope, records, context_window=window)


def test_lexical_search_finds_a_rare_word_and_hybrid_keeps_it_first(store: VectorStore):
    filler = [f"an ordinary note about the weather on day {i}" for i in range(20)]
    store.upsert(SCOPE, [_record(f"f{i}", text, i) for i, text in enumerate(filler)])
    store.upsert(SCOPE, [_record("code", "the locker code is QZ4471 for the gym", 100)])
    vector = EMBEDDER.embed(["QZ4471"])[0]
    for mode in ("lexical", "hybrid"):
        hits = store.search(SCOPE, vector, 5, {}, text="what is QZ4471?", mode=mode)
        assert hits[0].id == "code", mode
        assert [h.score for h in hits] == sorted((h.score or 0.0 for h in hits), reverse=True)
        assert all(h.score is not None and 0.0 <= h.score <= 1.0 for h in hits)  # the rankers' mean, 0..1
    dense = store.search(SCOPE, vector, 5, {})  # dense mode ignores the words
    assert all(h.score is not None and -1.0 <= h.score <= 1.0 for h in dense)


def test_the_context_window_finds_an_answer_by_the_words_of_its_question(store: VectorStore):
    lines = ["Ana: which colour do you prefer for the kitchen walls?", "Bo: sage green, definitely"]
    with_context, alone = Scope("ns", "key", "ctx"), Scope("ns", "key", "alone")
    _talk(store, with_context, lines, BIG_SEQ, window=1)
    _talk(store, alone, lines, BIG_SEQ, window=0)
    query = EMBEDDER.embed(["kitchen walls colour"])[0]
    found = {h.id for h in store.search(with_context, query, 5, {}, text="kitchen walls colour", mode="lexical")}
    assert found == {f"t{BIG_SEQ}", f"t{BIG_SEQ + 1}"}  # the answer is found by its question's words
    found = {h.id for h in store.search(alone, query, 5, {}, text="kitchen walls colour", mode="lexical")}
    assert found == {f"t{BIG_SEQ}"}  # without context only the question matches


def test_context_reaches_back_across_writes_in_seq_order_exactly(store: VectorStore):
    scope = Scope("ns", "key", "later")
    store.upsert(scope, [_record("question", "Ana: where did you park the bicycle?", BIG_SEQ)])
    store.upsert(scope, [_record("aside", "Bo: unrelated remark about lunch", BIG_SEQ + 2)])
    # Written later with a seq between the two, 1 ns from each: beyond float precision, so only an exact
    # integer comparison gives it the question (and not the aside) as its context.
    store.upsert(scope, [_record("answer", "Bo: behind the library", BIG_SEQ + 1)], context_window=1)
    store.upsert(scope, [_record("after", "Bo: next to the red door", BIG_SEQ + 3)], context_window=1)
    query = EMBEDDER.embed(["bicycle"])[0]
    assert {h.id for h in store.search(scope, query, 5, {}, text="bicycle parked", mode="lexical")} == {
        "question",
        "answer",
    }
    assert {h.id for h in store.search(scope, query, 5, {}, text="lunch remark", mode="lexical")} == {"aside", "after"}


def test_lexical_and_hybrid_search_keep_scope_filters_and_expiry(store: VectorStore):
    other = Scope("other-ns", "key", "notes")
    # Unrelated items elsewhere, so "zebra" is a rare word of the collection (IDF is collection-wide).
    filler = Scope("filler-ns", "key", "notes")
    store.upsert(filler, [_record(f"w{i}", f"weather report number {i}", i) for i in range(20)])
    store.upsert(SCOPE, [_record("mine", "zebra crossing near the school", 1, additional_metadata={"kind": "a"})])
    store.upsert(SCOPE, [_record("filtered", "zebra crossing again", 2, additional_metadata={"kind": "b"})])
    expired = T0 - timedelta(days=1)
    store.upsert(SCOPE, [_record("gone", "zebra crossing expired", 3, expires_at=expired)])
    store.upsert(other, [_record("theirs", "zebra crossing of another tenant", 1)])
    vector = EMBEDDER.embed(["zebra"])[0]
    for mode in ("lexical", "hybrid"):
        assert [h.id for h in store.search(SCOPE, vector, 10, {"kind": "a"}, text="zebra", mode=mode)] == ["mine"]
        assert {h.id for h in store.search(SCOPE, vector, 10, {}, text="zebra", mode=mode)} == {"mine", "filtered"}


# -- facts: formation's items, searched while live ----------------------------------------------------------------

MODES: tuple[SearchMode, ...] = ("dense", "lexical", "hybrid")


def _fact(**extra: object) -> FactInfo:
    fields: dict[str, object] = {
        "kind": "preference",
        "entities": ["Alice"],
        "occurred_at": T0 - timedelta(days=3),
        "confidence": 0.8,
        "sources": ["m1", "m2"],
        "formed_by": "a-model",
        "prompt_version": "facts-v1",
        "op_id": "op-1",
        "valid_from": T0,
        "events": [FactEvent(op_id="op-1", decision="add", sources=["m1"], model="a-model", at=T0)],
    }
    fields.update(extra)
    return FactInfo.model_validate(fields)


def _superseded(fact: FactInfo, by: str) -> FactInfo:
    later = T0 + timedelta(days=1)
    event = FactEvent(op_id="op-2", decision="superseded", sources=["m3"], at=later)
    return fact.model_copy(update={"valid_to": later, "superseded_by": by, "events": [*fact.events, event]})


def _found(
    store: VectorStore, query: str, mode: SearchMode, limit: int = 10, *, include_superseded: bool = False
) -> list[str]:
    vector = EMBEDDER.embed([query])[0]
    hits = store.search(SCOPE, vector, limit, {}, text=query, mode=mode, include_superseded=include_superseded)
    return [h.id for h in hits]


def _facts(store: VectorStore) -> None:
    """A superseded fact ``old`` (the query's best match), the live fact ``new`` that replaced it, and a plain item;
    filler elsewhere keeps their words rare (IDF is collection-wide)."""
    filler = Scope("filler-ns", "key", "notes")
    store.upsert(filler, [_record(f"w{i}", f"weather report number {i}", i) for i in range(20)])
    live = _fact(op_id="op-2", supersedes="old")
    store.upsert(
        SCOPE,
        [
            _record("old", "Alice drinks green tea", 1, fact=_superseded(_fact(), "new")),
            _record("new", "Alice drinks green tea with oat milk now", 2, fact=live),
            _record("note", "green tea shop opening hours", 3),
        ],
    )


def test_a_superseded_fact_is_left_out_of_every_search_mode_unless_asked(store: VectorStore):
    _facts(store)
    for mode in MODES:
        assert "old" not in _found(store, "Alice drinks green tea", mode), mode
        assert {"new", "note"} <= set(_found(store, "Alice drinks green tea", mode)), mode
        # Left out before the limit is taken: the best live match fills the one place.
        assert _found(store, "Alice drinks green tea", mode, limit=1) != ["old"], mode
        assert _found(store, "Alice drinks green tea", mode, limit=1) != [], mode
        everything = _found(store, "Alice drinks green tea", mode, include_superseded=True)
        assert {"old", "new", "note"} <= set(everything), mode
    assert _found(store, "Alice drinks green tea", "dense", limit=1, include_superseded=True) == ["old"]


def test_a_superseded_fact_is_still_read_by_id_and_listed(store: VectorStore):
    _facts(store)
    assert [i.id for i in store.list_items(SCOPE)] == ["old", "new", "note"]
    (old,) = store.retrieve(SCOPE, ["old"])
    assert old.fact is not None
    assert not old.fact.live
    assert old.fact.superseded_by == "new"
    assert store.count(SCOPE) == 3


def test_a_fact_round_trips_every_field(store: VectorStore):
    fact = _superseded(_fact(supersedes="older", entities=["Alice", "Lyon"]), "newer")
    record = _record("f", "Alice moved to Lyon", 5, fact=fact, importance=0.7, source="formation")
    store.upsert(SCOPE, [record, _record("plain", "no fact here", 6)])
    expected = record.item.model_copy(update={"seq": 5})
    assert store.retrieve(SCOPE, ["f"]) == [expected]
    assert store.list_items(SCOPE)[0] == expected
    (hit,) = [h for h in store.search(SCOPE, record.vector, 2, {}, include_superseded=True) if h.id == "f"]
    assert hit.model_copy(update={"score": None}) == expected
    assert store.retrieve(SCOPE, ["plain"])[0].fact is None


def test_set_fields_supersedes_a_live_fact_out_of_searches(store: VectorStore):
    from memory_core.engine.stores.base import fact_payload

    live = _fact()
    store.upsert(SCOPE, [_record("f", "Alice drinks green tea", 1, fact=live), _record("g", "green tea shop", 2)])
    assert all("f" in _found(store, "Alice drinks green tea", mode) for mode in MODES)
    superseded = _superseded(live, "g")
    fields = {"fact": superseded.model_dump(mode="json"), "superseded": 1}
    assert fact_payload(superseded) == fields  # what a writer sends, as ``to_payload`` would write it
    store.set_fields(SCOPE, ["f"], fields, seq=1)
    for mode in MODES:
        assert "f" not in _found(store, "Alice drinks green tea", mode), mode
        assert "f" in _found(store, "Alice drinks green tea", mode, include_superseded=True), mode
    assert store.retrieve(SCOPE, ["f"])[0].fact == superseded


@pytest.mark.parametrize("kind", ["edge", "qdrant_local"])
def test_a_store_written_before_facts_searches_its_items_and_indexes_the_flag(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import memory_core.engine.stores.edge as edge_module
    import memory_core.engine.stores.qdrant as qdrant_module
    from memory_core.engine.stores.base import NUMERIC_INDEX_FIELDS, to_payload

    def earlier_payload(scope: Scope, record: ItemRecord) -> dict[str, Any]:
        payload = to_payload(scope, record)
        del payload["fact"], payload["superseded"]  # what a release before facts wrote
        return payload

    module: Any = edge_module if kind == "edge" else qdrant_module
    with monkeypatch.context() as earlier:
        earlier.setattr(module, "to_payload", earlier_payload)
        earlier.setattr(module, "NUMERIC_INDEX_FIELDS", tuple(f for f in NUMERIC_INDEX_FIELDS if f != "superseded"))
        old = _open(kind, tmp_path) if kind == "edge" else _open_local(tmp_path)
        old.upsert(SCOPE, [_record("a", "Alice drinks green tea", 1)])
        if isinstance(old, EdgeVectorStore):
            assert "superseded" not in old._items.info().payload_schema
        old.close()
    store = _open(kind, tmp_path) if kind == "edge" else _open_local(tmp_path)
    try:
        if isinstance(store, EdgeVectorStore):  # the embedded engine indexes what it lacks on open
            assert "superseded" in store._items.info().payload_schema
        store.upsert(SCOPE, [_record("b", "Alice drinks green tea daily", 2, fact=_superseded(_fact(), "a"))])
        assert store.retrieve(SCOPE, ["a"])[0].fact is None
        for mode in MODES:  # a point without the flag is no superseded fact
            assert _found(store, "Alice drinks green tea", mode) == ["a"], mode
    finally:
        store.close()


def _open_local(tmp_path: Path) -> VectorStore:
    """qdrant-client's local mode on disk, so a second open finds what the first wrote."""
    return QdrantVectorStore.connect(
        str(tmp_path / "local"), api_key=None, timeout=5, collection="contract", dimension=EMBEDDER.dimension
    )


# -- migration from the dense-only layout -----------------------------------------------------


def _legacy_points(scope: Scope) -> list[tuple[str, list[float], dict[str, object]]]:
    from memory_core.engine.stores.base import point_id, to_payload

    lines = ["Ana: which colour do you prefer for the kitchen walls?", "Bo: sage green, definitely"]
    records = [_record(f"t{i}", line, BIG_SEQ + i) for i, line in enumerate(lines)]
    return [(point_id(scope, r.item.id), list(map(float, r.vector)), to_payload(scope, r)) for r in records]


def _edge_registry(path: Path, definition: MemorySet) -> None:
    """An embedded set registry of an earlier layout, holding ``definition`` for ns/key."""
    import qdrant_edge as qe

    from memory_core.engine.stores.base import set_point_id, set_to_payload

    path.mkdir()
    sets = qe.EdgeShard.create(
        str(path), qe.EdgeConfig(vectors={"dense": qe.EdgeVectorParams(size=1, distance=qe.Distance.Dot)})
    )
    payload = set_to_payload("ns", "key", definition)
    point = qe.Point(set_point_id("ns", "key", definition.name), {"dense": [1.0]}, payload)
    sets.update(qe.UpdateOperation.upsert_points([point]))
    sets.close()


def _server_registry(client: Any, collection: str, definition: MemorySet) -> None:
    """The set registry of an earlier layout's ``collection`` on a server, holding ``definition`` for ns/key."""
    from qdrant_client import models as qm

    from memory_core.engine.stores.base import set_point_id, set_to_payload

    registry = f"{collection}__sets"
    client.create_collection(registry, vectors_config={"dense": qm.VectorParams(size=1, distance=qm.Distance.DOT)})
    payload = set_to_payload("ns", "key", definition)
    point = qm.PointStruct(id=set_point_id("ns", "key", definition.name), vector={"dense": [1.0]}, payload=payload)
    client.upsert(registry, points=[point])


def _open_on_server(client: Any, earlier: tuple[str, ...], source: str, check: Callable[[VectorStore], None]) -> None:
    """Opens a new store over ``client`` that may fill itself from ``earlier``, and runs ``check`` on it."""
    store = QdrantVectorStore(
        client, collection="new", dimension=EMBEDDER.dimension, location=":memory:", earlier=earlier
    )
    try:
        check(store)
        assert [name for name in earlier if client.collection_exists(name)] == [source]  # kept as a backup
    finally:
        store.close()


def _check_migrated(store: VectorStore) -> None:
    scope = Scope("ns", "key", "chat")
    assert [i.id for i in store.list_items(scope)] == ["t0", "t1"]
    assert store.get_set("ns", "key", "chat") == MemorySet(name="chat")
    query = EMBEDDER.embed(["kitchen walls"])[0]
    # Migrated items get both BM25 vectors, the context one with the items before them.
    assert {h.id for h in store.search(scope, query, 5, {}, text="kitchen walls", mode="lexical")} == {"t0", "t1"}


def test_the_embedded_engine_migrates_a_dense_only_store_and_keeps_it(tmp_path: Path):
    import qdrant_edge as qe

    scope = Scope("ns", "key", "chat")
    old = tmp_path / "old"
    old.mkdir()
    dense = qe.EdgeConfig(vectors={"dense": qe.EdgeVectorParams(size=EMBEDDER.dimension, distance=qe.Distance.Cosine)})
    shard = qe.EdgeShard.create(str(old), dense)
    shard.update(
        qe.UpdateOperation.upsert_points([qe.Point(pid, {"dense": v}, p) for pid, v, p in _legacy_points(scope)])
    )
    shard.close()
    _edge_registry(tmp_path / "old__sets", MemorySet(name="chat"))

    store = EdgeVectorStore(tmp_path, collection="new", dimension=EMBEDDER.dimension, earlier=("absent", "old"))
    try:
        _check_migrated(store)
    finally:
        store.close()
    assert any(old.iterdir())  # the old layout is kept as a backup
    reopened = EdgeVectorStore(tmp_path, collection="new", dimension=EMBEDDER.dimension, earlier=("old",))
    try:  # opening again does not migrate twice
        assert [i.id for i in reopened.list_items(scope)] == ["t0", "t1"]
    finally:
        reopened.close()


def test_the_server_adapter_migrates_a_dense_only_collection():
    from qdrant_client import QdrantClient
    from qdrant_client import models as qm

    client = QdrantClient(location=":memory:")
    client.create_collection(
        "old", vectors_config={"dense": qm.VectorParams(size=EMBEDDER.dimension, distance=qm.Distance.COSINE)}
    )
    points = [
        qm.PointStruct(id=pid, vector={"dense": v}, payload=p)
        for pid, v, p in _legacy_points(Scope("ns", "key", "chat"))
    ]
    client.upsert("old", points=points, wait=True)
    _server_registry(client, "old", MemorySet(name="chat"))
    _open_on_server(client, ("absent", "old"), "old", _check_migrated)


# -- migration from the v2 layout (BM25 weights of another length normalization) -------------

_STALE_TERM = 7  # the old points' sparse vectors hold only this token: a search finds them only if re-indexed


def _v2_points(scope: Scope) -> list[tuple[str, list[float] | None, dict[str, object]]]:
    """Two items and the tombstone of a third, deleted at a later ``seq`` than any write of it."""
    from memory_core.engine.stores.base import point_id, tombstone_payload

    items = [(pid, dense, payload) for pid, dense, payload in _legacy_points(scope)]
    tombstone = tombstone_payload(scope, "t2", BIG_SEQ + 10, keep_until=4_000_000_000.0)
    return [*items, (point_id(scope, "t2"), None, tombstone)]


def _check_reindexed(store: VectorStore) -> None:
    scope = Scope("ns", "key", "chat")
    assert [i.id for i in store.list_items(scope)] == ["t0", "t1"]
    query = EMBEDDER.embed(["kitchen walls"])[0]
    # Re-indexed from the stored text, with the set's own context window (0): the reply that follows the
    # question does not inherit its words, as it would with the default window of 2.
    assert [h.id for h in store.search(scope, query, 5, {}, text="kitchen walls", mode="lexical")] == ["t0"]
    # The tombstone came along: a late write of the deleted item, older than the delete, stays deleted.
    store.upsert(scope, [_record("t2", "late redelivery", BIG_SEQ + 5, memory_set_name="chat")])
    assert "t2" not in {i.id for i in store.list_items(scope)}


def test_the_embedded_engine_reindexes_a_v2_store_with_its_windows_and_tombstones(tmp_path: Path):
    import qdrant_edge as qe

    from memory_core.engine.stores.base import SPARSE_NAMES

    scope = Scope("ns", "key", "chat")
    stale = qe.SparseVector([_STALE_TERM], [1.0])
    config = qe.EdgeConfig(
        vectors={"dense": qe.EdgeVectorParams(size=EMBEDDER.dimension, distance=qe.Distance.Cosine)},
        sparse_vectors={n: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf) for n in SPARSE_NAMES},
    )
    shard = qe.EdgeShard.create(str(tmp_path / "old_v2"), config)
    points = [
        qe.Point(pid, {} if v is None else {"dense": v, **dict.fromkeys(SPARSE_NAMES, stale)}, p)
        for pid, v, p in _v2_points(scope)
    ]
    shard.update(qe.UpdateOperation.upsert_points(points))
    shard.close()
    _edge_registry(tmp_path / "old_v2__sets", MemorySet(name="chat", context_window=0))

    store = EdgeVectorStore(tmp_path, collection="new", dimension=EMBEDDER.dimension, earlier=("old_v2", "old"))
    try:
        assert store.get_set("ns", "key", "chat") == MemorySet(name="chat", context_window=0)
        _check_reindexed(store)
    finally:
        store.close()


def test_the_server_adapter_reindexes_a_v2_collection_with_its_windows_and_tombstones():
    from qdrant_client import QdrantClient
    from qdrant_client import models as qm

    from memory_core.engine.stores.base import SPARSE_NAMES

    client = QdrantClient(location=":memory:")
    client.create_collection(
        "old_v2",
        vectors_config={"dense": qm.VectorParams(size=EMBEDDER.dimension, distance=qm.Distance.COSINE)},
        sparse_vectors_config={n: qm.SparseVectorParams(modifier=qm.Modifier.IDF) for n in SPARSE_NAMES},
    )
    stale = qm.SparseVector(indices=[_STALE_TERM], values=[1.0])
    points = [
        qm.PointStruct(
            id=pid, vector={} if v is None else {"dense": v, **dict.fromkeys(SPARSE_NAMES, stale)}, payload=p
        )
        for pid, v, p in _v2_points(Scope("ns", "key", "chat"))
    ]
    client.upsert("old_v2", points=points, wait=True)
    _server_registry(client, "old_v2", MemorySet(name="chat", context_window=0))
    _open_on_server(client, ("old_v2", "old"), "old_v2", _check_reindexed)


def test_an_embedded_store_of_the_v2_layout_is_reindexed_into_v3_when_a_worker_opens_it(tmp_path: Path):
    from memory_core.core.settings import QdrantSettings
    from memory_core.engine.stores import collection_name, earlier_collection_names, open_store

    settings = QdrantSettings(backend="edge", path=tmp_path)
    current = collection_name(settings, "all-MiniLM-L6-v2")
    assert current.endswith("_v3")
    assert earlier_collection_names(settings, "all-MiniLM-L6-v2") == (current[:-3] + "_v2", current[:-3])
    scope = Scope("ns", "key", "notes")
    old = EdgeVectorStore(tmp_path, collection=current[:-3] + "_v2", dimension=EMBEDDER.dimension)
    old.put_set("ns", "key", MemorySet(name="notes"))
    item = _record("a", "the kitchen walls are sage green", 1).item
    old.upsert(scope, [ItemRecord(item=item, seq=1, vector=EMBEDDER.embed([str(item.value)])[0])])
    old.close()
    store = open_store(settings, model_name="all-MiniLM-L6-v2", dimension=EMBEDDER.dimension)
    try:
        assert [i.id for i in store.list_items(scope)] == ["a"]
        assert store.location == str(tmp_path.resolve())
    finally:
        store.close()
    assert (tmp_path / current).is_dir()
    assert (tmp_path / (current[:-3] + "_v2")).is_dir()  # kept as a backup


def test_optimize_builds_the_index_and_searches_answer_the_same(store: VectorStore):
    store.upsert(SCOPE, [_record(f"n{i}", f"note number {i} about gardens and {i % 7} birds", i) for i in range(300)])
    query = EMBEDDER.embed(["note number 42 about gardens"])[0]
    before = [h.id for h in store.search(SCOPE, query, 5, {}, text="note number 42 gardens", mode="hybrid")]
    assert isinstance(store.optimize(), bool)
    after = [h.id for h in store.search(SCOPE, query, 5, {}, text="note number 42 gardens", mode="hybrid")]
    assert after[0] == before[0] == "n42"
    assert store.count(SCOPE) == 300


def test_a_word_every_item_shares_is_no_lexical_evidence(store: VectorStore):
    facts = ["Alice prefers green tea", "Alice moved to Lyon", "Alice is allergic to peanuts", "Alice runs marathons"]
    store.upsert(SCOPE, [_record(f"a{i}", text, i) for i, text in enumerate(facts)])
    vector = EMBEDDER.embed(["Alice"])[0]
    assert store.search(SCOPE, vector, 5, {}, text="what about Alice?", mode="lexical") == []
    assert [h.id for h in store.search(SCOPE, vector, 5, {}, text="Alice and her peanuts", mode="lexical")] == ["a2"]


def _at_cosine(cosine: float, axis: int) -> list[float]:
    """A unit vector at ``cosine`` to the query vector (axis 0), leaning towards its own ``axis``."""
    vector = [0.0] * EMBEDDER.dimension
    vector[0], vector[axis] = cosine, (1 - cosine**2) ** 0.5
    return vector


def test_hybrid_breaks_a_lexical_near_tie_by_meaning(store: VectorStore):
    # "Alice" is rare in the collection but in every fact of this set: the facts tie on BM25 to within a
    # percent, the shortest a hair ahead. Pure DBSF made that hair a full vote for the peanut fact.
    store.upsert(Scope("ns", "other", "notes"), [_record(f"f{i}", f"weather report {i}", i) for i in range(30)])
    facts = [
        ("tea", "Alice prefers green tea over coffee, no sugar, at every meeting", 0.63),
        ("peanuts", "Alice is allergic to peanuts", 0.53),
        ("lyon", "Alice moved to Lyon in May", 0.45),
        ("marathon", "Alice runs the Lyon half marathon every year", 0.40),
    ]
    records = [
        ItemRecord(item=_record(i, text, n).item, seq=n, vector=_at_cosine(cosine, n + 1))
        for n, (i, text, cosine) in enumerate(facts)
    ]
    store.upsert(SCOPE, records)
    query = _at_cosine(1.0, 1)
    text = "what does Alice like to drink?"  # only "Alice" matches
    assert store.search(SCOPE, query, 4, {}, text=text, mode="lexical")[0].id == "peanuts"  # BM25 alone, unchanged
    assert [h.id for h in store.search(SCOPE, query, 4, {})][:2] == ["tea", "peanuts"]
    assert [h.id for h in store.search(SCOPE, query, 4, {}, text=text, mode="hybrid")][:2] == ["tea", "peanuts"]
    # A real lexical match still outweighs meaning: the one fact with "Lyon" comes first among the Lyon facts.
    assert store.search(SCOPE, query, 4, {}, text="Alice and Lyon in May", mode="hybrid")[0].id == "lyon"


def test_namespace_counts_rank_namespaces_by_items(store: VectorStore):
    store.put_set("ns", "key", MemorySet(name="notes"))
    store.put_set("other", "key", MemorySet(name="notes"))
    store.upsert(SCOPE, [_record(f"a{i}", f"text {i}", i) for i in range(3)])
    store.upsert(Scope("other", "key", "notes"), [_record("b", "text b", 1)])
    assert store.namespace_counts(10) == {"ns": 3, "other": 1}
    assert store.namespace_counts(1) == {"ns": 3}


def test_item_vectors_return_the_stored_vectors_of_this_set_only(store: VectorStore):
    record = _record("a", "first", 1)
    store.upsert(SCOPE, [record])
    store.upsert(Scope("other", "key", "notes"), [_record("b", "other", 1)])
    vectors = store.item_vectors(SCOPE, ["a", "b", "missing"])
    assert list(vectors) == ["a"]
    assert vectors["a"] == pytest.approx(list(record.vector), abs=1e-3)  # stored as float16


def test_an_edge_snapshot_opens_as_a_store_with_the_same_items(tmp_path: Path):
    store = EdgeVectorStore(tmp_path / "live", collection="contract", dimension=EMBEDDER.dimension)
    store.put_set("ns", "key", MemorySet(name="notes"))
    store.upsert(SCOPE, [_record("a", "first", 1), _record("b", "second", 2)])
    copied = store.snapshot(tmp_path / "copy")
    store.upsert(SCOPE, [_record("c", "after the snapshot", 3)])
    store.close()
    assert sorted(Path(p).name for p in copied) == ["contract", "contract__meta", "contract__sets"]
    restored = EdgeVectorStore(tmp_path / "copy", collection="contract", dimension=EMBEDDER.dimension)
    try:
        assert [i.id for i in restored.list_items(SCOPE)] == ["a", "b"]
        assert restored.get_set("ns", "key", "notes") == MemorySet(name="notes")
    finally:
        restored.close()


FINGERPRINT = EMBEDDER.fingerprint


def test_a_store_records_the_embedder_fingerprint_and_reads_it_back(store: VectorStore):
    assert store.recorded_fingerprint() is None  # opened alone, with no embedder to check
    store.record_fingerprint(FINGERPRINT)
    assert store.recorded_fingerprint() == FINGERPRINT
    other = FINGERPRINT.model_copy(update={"query_prefix": "query: "})
    store.record_fingerprint(other)  # what a switch to a re-embedded collection does
    assert store.recorded_fingerprint() == other


def _persistent(kind: str, path: Path, **options: Any) -> VectorStore:
    if kind == "edge":
        return EdgeVectorStore(path, collection="contract", dimension=EMBEDDER.dimension, **options)
    return QdrantVectorStore.connect(
        str(path), api_key=None, timeout=5, collection="contract", dimension=EMBEDDER.dimension, **options
    )


@pytest.mark.parametrize("kind", ["edge", "qdrant_local"])
def test_the_fingerprint_survives_a_reopen_and_refuses_an_embedder_that_differs_only_in_revision(
    kind: str, tmp_path: Path
):
    first = _persistent(kind, tmp_path, fingerprint=FINGERPRINT)  # a new store records its embedder's
    first.close()
    again = _persistent(kind, tmp_path, fingerprint=FINGERPRINT)
    assert again.recorded_fingerprint() == FINGERPRINT
    again.close()
    other = FINGERPRINT.model_copy(update={"revision": "another-weights-file"})  # same dimension
    with pytest.raises(ConfigurationError) as refused:
        _persistent(kind, tmp_path, fingerprint=other)
    message = str(refused.value)
    assert "\n" not in message
    assert FINGERPRINT.describe() in message
    assert other.describe() in message
    assert f"memory-core reindex --to {other.spec}" in message
    assert "MEMORY_EMBEDDER__MODEL" in message
    _persistent(kind, tmp_path).close()  # the refused open released the store (the edge engine's lock)


def _fill_legacy(kind: str, path: Path, settings: QdrantSettings, model: str, dimension: int) -> None:
    """A store as workers filled it before fingerprints: items in the model's collection, no record."""
    from memory_core.engine.stores import collection_name

    name = collection_name(settings, model)
    record = ItemRecord(item=_record("a", "an old fact", 1).item, seq=1, vector=[1.0] + [0.0] * (dimension - 1))
    if kind == "edge":
        old: VectorStore = EdgeVectorStore(path, collection=name, dimension=dimension, meta="unused")
    else:
        old = QdrantVectorStore.connect(
            str(path), api_key=None, timeout=5, collection=name, dimension=dimension, meta="unused"
        )
    old.upsert(SCOPE, [record])
    old.close()


@pytest.mark.parametrize("kind", ["edge", "local"])
def test_a_store_filled_before_fingerprints_gets_minilms_on_first_open(kind: str, tmp_path: Path):
    from memory_core.engine.embedders.hashing import hashing_fingerprint
    from memory_core.engine.embedders.minilm import minilm_fingerprint
    from memory_core.engine.stores import collection_name, open_store

    settings = QdrantSettings(backend=kind, path=tmp_path / "store")
    _fill_legacy("edge" if kind == "edge" else "qdrant_local", settings.path, settings, "all-MiniLM-L6-v2", 384)
    hashing = hashing_fingerprint(384)
    with pytest.raises(ConfigurationError, match="memory-core reindex --to hashing") as refused:
        open_store(settings, model_name="hashing-384", dimension=384, fingerprint=hashing)
    assert minilm_fingerprint().describe() in str(refused.value)
    if kind == "edge":  # refused before anything was made for the other model
        assert not (settings.path / collection_name(settings, "hashing-384")).exists()
    store = open_store(settings, model_name="all-MiniLM-L6-v2", dimension=384, fingerprint=minilm_fingerprint())
    try:
        assert store.recorded_fingerprint() == minilm_fingerprint()
        assert [i.id for i in store.list_items(SCOPE)] == ["a"]
    finally:
        store.close()


def test_a_test_store_filled_by_the_hashing_embedder_gets_its_fingerprint(tmp_path: Path):
    from memory_core.engine.embedders.hashing import hashing_fingerprint
    from memory_core.engine.stores import open_store

    settings = QdrantSettings(backend="edge", path=tmp_path / "store")
    _fill_legacy("edge", settings.path, settings, "hashing-384", 384)
    store = open_store(settings, model_name="hashing-384", dimension=384, fingerprint=hashing_fingerprint(384))
    try:
        assert store.recorded_fingerprint() == hashing_fingerprint(384)
    finally:
        store.close()


def test_a_fresh_store_records_the_fingerprint_of_the_embedder_that_opens_it(tmp_path: Path):
    from memory_core.engine.stores import open_store

    settings = QdrantSettings(backend="edge", path=tmp_path / "store")
    store = open_store(settings, model_name=EMBEDDER.model_name, dimension=EMBEDDER.dimension, fingerprint=FINGERPRINT)
    try:
        assert store.recorded_fingerprint() == FINGERPRINT
    finally:
        store.close()


def test_an_unreadable_fingerprint_record_fails_the_open_typed(tmp_path: Path):
    from qdrant_client import models as qm

    from memory_core.engine.stores.fingerprints import FINGERPRINT_POINT

    store = QdrantVectorStore.connect(str(tmp_path), api_key=None, timeout=5, collection="c", dimension=8)
    client = store._client  # the engine itself: plant what memory-core never writes
    client.upsert(
        "c__meta", points=[qm.PointStruct(id=FINGERPRINT_POINT, vector={"dense": [1.0]}, payload={"fingerprint": 3})]
    )
    try:
        with pytest.raises(StoreError, match="fingerprint recorded in collection c__meta is unreadable"):
            store.recorded_fingerprint()
    finally:
        store.close()
