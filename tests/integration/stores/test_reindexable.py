"""What a reindex needs of each Qdrant adapter (``stores.base.Reindexable``): records, a sibling collection,
point-id ordered scans that partition the store, and copies that keep the monotonic rules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_core.core.errors import StoreError
from memory_core.engine.reindex import PARTS, part_bounds
from memory_core.engine.stores.base import ItemRecord, RawPoint, ReindexableStore, point_id
from memory_core.engine.stores.edge import EdgeVectorStore
from memory_core.engine.stores.qdrant import QdrantVectorStore

from .test_contract import EMBEDDER, FINGERPRINT, SCOPE, _record


def _open(kind: str, path: Path, collection: str = "contract") -> ReindexableStore:
    if kind == "edge":
        return EdgeVectorStore(path, collection=collection, dimension=EMBEDDER.dimension, meta="meta")
    return QdrantVectorStore.connect(
        str(path), api_key=None, timeout=5, collection=collection, dimension=EMBEDDER.dimension, meta="meta"
    )


@pytest.fixture(params=["edge", "qdrant_local"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(kind: str, tmp_path: Path) -> Iterator[ReindexableStore]:
    opened = _open(kind, tmp_path)
    yield opened
    opened.close()


def _all(store: ReindexableStore, limit: int = 7) -> list[RawPoint]:
    """Every point, part by part, page by page (``limit`` small, so pages end inside parts)."""
    found: list[RawPoint] = []
    for part in range(PARTS):
        start, stop = part_bounds(part)
        cursor: str | None = start
        while cursor is not None:
            page, cursor = store.scan(cursor, stop, limit)
            assert all(part_bounds(part)[0] <= p.id and (stop is None or p.id < stop) for p in page)
            found.extend(page)
    return found


def test_scans_of_the_parts_cover_every_point_once_in_id_order_tombstones_and_bm25_included(store):
    store.upsert(SCOPE, [_record(f"i{n}", f"fact number {n}", n + 1) for n in range(60)])
    store.delete(SCOPE, {"i3": 100, "i4": 100})
    points = _all(store)
    assert [p.id for p in points] == sorted(point_id(SCOPE, f"i{n}") for n in range(60))
    tombstones = [p for p in points if p.tombstone]
    assert {p.payload["item_id"] for p in tombstones} == {"i3", "i4"}
    assert all(not p.sparse for p in tombstones)
    assert all(set(p.sparse) == {"bm25", "bm25_ctx"} for p in points if not p.tombstone)
    assert store.point_count() == 60


def test_copies_land_only_over_older_points_and_a_tombstone_over_its_own_version(store):
    sibling = store.open_sibling("other", 8)  # another dimension than the store's
    try:
        store.upsert(SCOPE, [_record("a", "alpha", 5), _record("b", "beta", 5), _record("c", "gamma", 5)])
        store.delete(SCOPE, {"c": 6})
        newer = _record("b", "beta, rewritten later", 9)
        sibling.upsert(SCOPE, [ItemRecord(item=newer.item, seq=9, vector=[0.1] * 8)])  # a mirrored write, newer
        points = {p.payload["item_id"]: p for p in _all(store)}
        dense = [0.5] * 8
        assert sibling.copy_in([(points["a"], dense), (points["b"], dense), (points["c"], None)]) == 2
        assert sibling.versions([point_id(SCOPE, i) for i in "abc"]) == {
            point_id(SCOPE, "a"): (5, False),
            point_id(SCOPE, "b"): (9, False),  # not taken back in time
            point_id(SCOPE, "c"): (6, True),
        }
        assert sibling.copy_in([(points["a"], dense)]) == 0  # a copy replayed changes nothing
        assert [i.value for i in sibling.retrieve(SCOPE, ["a", "b", "c"])] == ["alpha", "beta, rewritten later"]
        # The store's own collection is untouched by the sibling's writes.
        assert [i.value for i in store.retrieve(SCOPE, ["a", "b", "c"])] == ["alpha", "beta"]
    finally:
        sibling.close()
    assert store.retrieve(SCOPE, ["a"])  # closing the sibling closed nothing of the store's


def test_records_round_trip_and_only_another_collection_can_be_dropped(store):
    assert store.read_record("reindex") is None
    store.write_record("reindex", {"state": "building", "n": 3})
    assert store.read_record("reindex") == {"state": "building", "n": 3}
    store.open_sibling("spare", EMBEDDER.dimension).close()
    assert store.drop_collection("spare")
    assert not store.drop_collection("spare")
    with pytest.raises(StoreError, match="open"):
        store.drop_collection(store.collection)
    with pytest.raises(StoreError, match="open"):
        store.open_sibling(store.collection, EMBEDDER.dimension)


def test_a_store_whose_fingerprint_record_names_another_collection_opens_that_one(kind: str, tmp_path: Path):
    first = _open(kind, tmp_path)
    first.record_fingerprint(FINGERPRINT)
    sibling = first.open_sibling("re_embedded", EMBEDDER.dimension)
    sibling.upsert(SCOPE, [_record("x", "in the new collection", 1)])
    sibling.close()
    from memory_core.engine.stores.fingerprints import FINGERPRINT_RECORD, fingerprint_payload

    first.write_record(FINGERPRINT_RECORD, fingerprint_payload(FINGERPRINT, "re_embedded"))  # what a switch writes
    first.close()
    again = (
        QdrantVectorStore.connect(
            str(tmp_path),
            api_key=None,
            timeout=5,
            collection="contract",
            dimension=EMBEDDER.dimension,
            meta="meta",
            fingerprint=FINGERPRINT,
        )
        if kind != "edge"
        else EdgeVectorStore(
            tmp_path, collection="contract", dimension=EMBEDDER.dimension, meta="meta", fingerprint=FINGERPRINT
        )
    )
    try:
        assert again.collection == "re_embedded"
        assert [i.value for i in again.retrieve(SCOPE, ["x"])] == ["in the new collection"]
    finally:
        again.close()


def test_owed_placeholders_hide_older_copies_and_give_way_to_the_write_they_stand_for(store):
    store.upsert(SCOPE, [_record("old", "an older version", 5), _record("new", "copied already", 9)])
    store.owe(SCOPE, {"old": 7, "new": 9, "fresh": 3})  # "new" holds the owed write itself: nothing is owed
    owed = set(store.owed(100))
    assert owed == {point_id(SCOPE, "old"), point_id(SCOPE, "fresh")}
    assert store.owed_count() == 2
    assert [i.id for i in store.retrieve(SCOPE, ["old", "new", "fresh"])] == ["new"]  # never read as an item
    held = store.raw_points([point_id(SCOPE, "old"), point_id(SCOPE, "new")])
    assert held[point_id(SCOPE, "old")].owed
    assert held[point_id(SCOPE, "old")].seq == 6
    assert not held[point_id(SCOPE, "new")].owed
    store.delete_expired(1e12, 100)  # the TTL sweep leaves placeholders alone
    assert store.owed_count() == 2
    # A copy older than the owed write is kept out; the write itself replaces its placeholder.
    stale = RawPoint(point_id(SCOPE, "old"), {**held[point_id(SCOPE, "new")].payload, "item_id": "old", "seq": 6}, {})
    assert store.copy_in([(stale, EMBEDDER.embed(["stale"])[0])]) == 0
    current = store.raw_points([point_id(SCOPE, "new")])[point_id(SCOPE, "new")]
    written = RawPoint(point_id(SCOPE, "old"), {**current.payload, "item_id": "old", "seq": 7}, current.sparse)
    assert store.copy_in([(written, EMBEDDER.embed(["written"])[0])]) == 1
    assert store.owed_count() == 1
    assert [i.seq for i in store.retrieve(SCOPE, ["old"])] == [7]


def test_a_removal_takes_only_points_still_at_the_version_read(store):
    store.upsert(SCOPE, [_record("a", "one", 5), _record("b", "two", 5)])
    store.upsert(SCOPE, [_record("b", "two, rewritten", 8)])
    removed = store.remove_unchanged({point_id(SCOPE, "a"): 5, point_id(SCOPE, "b"): 5, point_id(SCOPE, "c"): 1})
    assert removed == 1
    assert [i.id for i in store.retrieve(SCOPE, ["a", "b"])] == ["b"]
    assert point_id(SCOPE, "a") not in store.raw_points([point_id(SCOPE, "a")])  # no tombstone left behind
