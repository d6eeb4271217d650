"""A store of an earlier layout is migrated in bounded batches (``stores.migration``), point for point as the
one-pass migration did it, and an interrupted migration (an error, or SIGKILL) resumes on the next open and
ends the same. On each Qdrant adapter."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from memory_core.core.errors import StoreError
from memory_core.core.models import MemorySet, MemorySetItem, Scope
from memory_core.engine.stores import migration
from memory_core.engine.stores.base import (
    LEXICAL,
    ItemRecord,
    RawPoint,
    ReindexableStore,
    SparseVector,
    context_windows,
    is_tombstone,
    item_text,
)
from memory_core.engine.stores.edge import EdgeVectorStore
from memory_core.engine.stores.qdrant import QdrantVectorStore

from .test_contract import BIG_SEQ, EMBEDDER, T0

SOURCE = "old_v2"
CURRENT = "new"
BATCH = 7  # small, so batches end inside sets and a resumed batch needs the texts before it
ROOT = Path(__file__).resolve().parents[3]

SETS = {
    Scope("ns", "k", "chat"): MemorySet(name="chat"),  # the default window, 2
    Scope("ns", "k", "wide"): MemorySet(name="wide", context_window=3),
    Scope("ns", "k", "solo"): MemorySet(name="solo", context_window=0),
    Scope("ns2", "k", "chat"): MemorySet(name="chat", context_window=1),
}
ORPHAN = Scope("ns", "k", "orphan")  # items whose set has no definition: migrated with window 2


def _open(kind: str, path: Path, collection: str, earlier: Sequence[str] = ()) -> ReindexableStore:
    if kind == "edge":
        return EdgeVectorStore(path, collection=collection, dimension=EMBEDDER.dimension, earlier=earlier, meta="meta")
    return QdrantVectorStore.connect(
        str(path),
        api_key=None,
        timeout=5,
        collection=collection,
        dimension=EMBEDDER.dimension,
        earlier=earlier,
        meta="meta",
    )


@pytest.fixture(params=["edge", "qdrant_local"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(migration, "MIGRATION_BATCH", BATCH)
    monkeypatch.setattr(migration, "PROGRESS_EVERY", 0.0)  # progress recorded after every batch
    monkeypatch.setattr(migration, "RELOAD_EVERY", 3 * BATCH)  # the embedded engine loads the new shard again


def _text(scope: Scope, n: int) -> str:
    text = f"{scope.set_name} turn {n} of {scope.namespace}: the garden {n % 5} and the kitchen {n % 3}"
    if n % 6 == 5:  # longer than the context keeps of a previous item (CONTEXT_WORDS)
        text += " " + " ".join(f"word{w}" for w in range(60))
    return text


def _item(scope: Scope, item_id: str, n: int) -> ItemRecord:
    value: object = _text(scope, n)
    if n % 4 == 3:
        value = {"role": "assistant", "content": value}  # a chat message: indexed as "role: content"
    item = MemorySetItem.model_validate(
        {
            "memory_set_name": scope.set_name,
            "id": item_id,
            "value": value,
            "created_time": T0,
            "last_accessed_time": T0,
            "additional_metadata": {"n": n},
        }
    )
    return ItemRecord(item=item, seq=BIG_SEQ + n // 3, vector=EMBEDDER.embed([str(item.value)])[0])  # seqs tie


def _fill_earlier_layout(kind: str, path: Path) -> list[tuple[str, dict[str, Any], list[float] | None]]:
    """A store of an earlier layout with several sets, tombstones, equal seqs and a set with no definition;
    returns its points ``(id, payload, dense)`` in point-id order, as the one-pass migration read them."""
    old = _open(kind, path, SOURCE)
    try:
        for scope, definition in SETS.items():
            old.put_set(scope.namespace, scope.key, definition)
        for number, scope in enumerate([*SETS, ORPHAN]):
            old.upsert(scope, [_item(scope, f"i{n}", n + number) for n in range(24)], context_window=2)
            old.delete(scope, {f"i{n}": BIG_SEQ + 1_000 for n in range(number, 24, 9)})
        return [(p.id, p.payload, dense) for p, dense in _points(old)]
    finally:
        old.close()


def _points(store: ReindexableStore) -> list[tuple[RawPoint, list[float] | None]]:
    """Every point of the store in point-id order (tombstones too), with its dense vector."""
    raw: list[RawPoint] = []
    cursor: str | None = "00000000-0000-0000-0000-000000000000"
    while cursor is not None:
        page, cursor = store.scan(cursor, None, 50)
        raw.extend(page)
    by_scope: dict[Scope, list[RawPoint]] = {}
    for point in raw:
        if not point.tombstone:
            by_scope.setdefault(
                Scope(point.payload["namespace"], point.payload["key"], point.payload["set"]), []
            ).append(point)
    dense: dict[str, list[float]] = {}
    for scope, points in by_scope.items():
        vectors = store.item_vectors(scope, [p.payload["item_id"] for p in points])
        dense.update({p.id: vectors[p.payload["item_id"]] for p in points})
    return [(point, dense.get(point.id)) for point in raw]


def _contents(store: ReindexableStore) -> dict[str, tuple[dict[str, Any], dict[str, SparseVector], Any]]:
    return {point.id: (point.payload, point.sparse, dense) for point, dense in _points(store)}


def _one_pass(
    points: Sequence[tuple[Any, dict[str, Any], list[float] | None]], windows: Mapping[tuple[str, str, str], int]
) -> list[tuple[Any, dict[str, Any], list[float] | None, dict[str, SparseVector]]]:
    """What the one-pass migration made of the whole store read into memory (its code, kept as the reference)."""
    by_scope: dict[tuple[str, str, str], list[tuple[Any, dict[str, Any], list[float]]]] = {}
    migrated: list[tuple[Any, dict[str, Any], list[float] | None, dict[str, SparseVector]]] = []
    for pid, payload, dense in points:
        if dense is None or is_tombstone(payload):
            migrated.append((pid, payload, None, {}))
            continue
        by_scope.setdefault((payload["namespace"], payload["key"], payload["set"]), []).append((pid, payload, dense))
    for scope, scoped in by_scope.items():
        window = windows.get(scope, 2)
        scoped.sort(key=lambda p: p[1]["seq"])
        texts = [item_text(p[1]["value"]) for p in scoped]
        for i, (pid, payload, dense) in enumerate(scoped):
            previous = texts[max(0, i - window) : i] if window else []
            migrated.append((pid, payload, dense, LEXICAL.item_vectors(texts[i], previous)))
    return migrated


def _assert_as_one_pass(
    kind: str, store: ReindexableStore, points: list[tuple[str, dict[str, Any], list[float] | None]]
) -> None:
    """The store holds what the one-pass migration wrote (the same points, payloads, dense and BM25 vectors)."""
    from memory_core.engine.stores.base import set_to_payload

    windows = context_windows(set_to_payload(s.namespace, s.key, d) for s, d in SETS.items())
    reference = store.open_sibling("reference", EMBEDDER.dimension)
    try:
        reference.copy_in([(RawPoint(pid, p, sparse), dense) for pid, p, dense, sparse in _one_pass(points, windows)])
        expected = _contents(reference)
    finally:
        reference.close()
    assert len(expected) == len(points)
    migrated = _contents(store)
    if kind == "qdrant_local":
        # Local mode normalizes cosine vectors again each time it loads a collection from its directory: the
        # points an interrupted run wrote may differ by one unit in the last place of a float32 component.
        for point_id, (payload, sparse, dense) in expected.items():
            expected[point_id] = (payload, sparse, None if dense is None else pytest.approx(dense, abs=1e-7))
    assert migrated == expected
    for scope, definition in SETS.items():
        assert store.get_set(scope.namespace, scope.key, scope.set_name) == definition
    assert store.get_set(*ORPHAN) is None


def _record(kind: str, path: Path) -> dict[str, Any] | None:
    """The migration's record, read by an open that migrates nothing."""
    store = _open(kind, path, CURRENT)
    try:
        return store.read_record(migration.migration_record(CURRENT))
    finally:
        store.close()


def _store_class(kind: str) -> type[EdgeVectorStore | QdrantVectorStore]:
    return EdgeVectorStore if kind == "edge" else QdrantVectorStore


def test_a_migration_in_batches_makes_what_the_one_pass_migration_made(kind, tmp_path, small_batches, monkeypatch):
    points = _fill_earlier_layout(kind, tmp_path)
    assert any(is_tombstone(p) for _, p, _ in points)
    assert any(p["set"] == ORPHAN.set_name for _, p, _ in points)
    store = _open(kind, tmp_path, CURRENT, earlier=(SOURCE,))
    try:
        _assert_as_one_pass(kind, store, points)
        record = store.read_record(migration.migration_record(CURRENT))
        assert record is not None
        assert (record["state"], record["source"], record["total"]) == ("complete", SOURCE, len(points))
    finally:
        store.close()

    def refused(self: Any, copies: Any) -> int:
        raise AssertionError("a migrated store was migrated again")

    monkeypatch.setattr(_store_class(kind), "copy_in", refused)
    _open(kind, tmp_path, CURRENT, earlier=(SOURCE,)).close()


def _copies_counted(monkeypatch: pytest.MonkeyPatch, kind: str, fail_at: int | None = None) -> list[int]:
    """Counts the migration's writes (``copy_in`` calls); the ``fail_at``-th raises instead of writing."""
    cls = _store_class(kind)
    original = cls.copy_in
    calls: list[int] = []

    def copy_in(self: Any, copies: Sequence[tuple[RawPoint, Sequence[float] | None]]) -> int:
        calls.append(len(copies))
        if len(calls) == fail_at:
            raise StoreError("no space left on device")
        return original(self, copies)

    monkeypatch.setattr(cls, "copy_in", copy_in)
    return calls


def test_a_migration_stopped_by_an_error_resumes_where_it_was_and_ends_the_same(
    kind, tmp_path, small_batches, monkeypatch
):
    points = _fill_earlier_layout(kind, tmp_path)
    _copies_counted(monkeypatch, kind, fail_at=6)
    with pytest.raises(StoreError, match="no space left"):
        _open(kind, tmp_path, CURRENT, earlier=(SOURCE,))
    record = _record(kind, tmp_path)
    assert record is not None
    assert (record["state"], record["cursor"]["done"], record["total"]) == ("copying", 5 * BATCH, len(points))

    resumed = _copies_counted(monkeypatch, kind)
    store = _open(kind, tmp_path, CURRENT, earlier=(SOURCE,))
    try:
        assert len(resumed) == -(-(len(points) - 5 * BATCH) // BATCH)  # only what was left
        _assert_as_one_pass(kind, store, points)
    finally:
        store.close()


_KILLED_OPEN = """
import os, signal, sys
from pathlib import Path
from memory_core.engine.stores import edge, migration

migration.MIGRATION_BATCH = {batch}
migration.PROGRESS_EVERY = 0.0
migration.RELOAD_EVERY = {batch} * 3
cls = edge.EdgeVectorStore if {method!r} == "copy_in" else edge._EarlierShard
original = getattr(cls, {method!r})
calls = []

def killed(self, *args):
    done = original(self, *args)
    calls.append(1)
    if len(calls) == 4:  # the batch is read or written; the next progress record never comes
        os.kill(os.getpid(), signal.SIGKILL)
    return done

setattr(cls, {method!r}, killed)
edge.EdgeVectorStore(
    Path(sys.argv[1]), collection={current!r}, dimension={dimension}, earlier=({source!r},), meta="meta"
)
"""


@pytest.mark.parametrize(
    ("method", "done"),
    [
        ("points", None),  # while the old shard is read into the spill file: nothing copied yet
        ("copy_in", 3 * BATCH),  # while the spill file is copied
    ],
)
def test_an_open_killed_while_migrating_is_resumed_by_the_next_and_ends_the_same(tmp_path, small_batches, method, done):
    points = _fill_earlier_layout("edge", tmp_path)
    script = _KILLED_OPEN.format(
        batch=BATCH, method=method, current=CURRENT, source=SOURCE, dimension=EMBEDDER.dimension
    )
    killed = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    record = _record("edge", tmp_path)
    assert record is not None
    assert record["state"] == ("started" if done is None else "copying")
    assert (record.get("cursor") or {}).get("done") == done

    store = _open("edge", tmp_path, CURRENT, earlier=(SOURCE,))
    try:
        _assert_as_one_pass("edge", store, points)
    finally:
        store.close()
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file() and "spill" in p.name) == []  # removed when done


def test_a_store_whose_unfinished_migration_lost_its_source_refuses_to_open(kind, tmp_path, small_batches, monkeypatch):
    _fill_earlier_layout(kind, tmp_path)
    _copies_counted(monkeypatch, kind, fail_at=2)
    with pytest.raises(StoreError):
        _open(kind, tmp_path, CURRENT, earlier=(SOURCE,))
    half = _open(kind, tmp_path, CURRENT)
    try:
        assert half.drop_collection(SOURCE)
    finally:
        half.close()
    with pytest.raises(StoreError, match=f"{SOURCE!r} is gone"):
        _open(kind, tmp_path, CURRENT, earlier=(SOURCE,))


def test_a_store_that_held_data_before_migrations_were_recorded_is_not_migrated(kind, tmp_path, monkeypatch):
    current = _open(kind, tmp_path, CURRENT)
    try:
        current.upsert(ORPHAN, [_item(ORPHAN, "kept", 1)])
    finally:
        current.close()
    _fill_earlier_layout(kind, tmp_path)
    copies = _copies_counted(monkeypatch, kind)
    store = _open(kind, tmp_path, CURRENT, earlier=(SOURCE,))
    try:
        assert [i.id for i in store.list_items(ORPHAN)] == ["kept"]
        assert copies == []
        assert store.read_record(migration.migration_record(CURRENT)) is None
    finally:
        store.close()
