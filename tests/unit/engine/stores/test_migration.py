"""The layout migration's order, spill file and resume, over a source and a target held in dicts."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_core.core.errors import StoreError
from memory_core.core.models import MemorySet
from memory_core.engine.stores import migration
from memory_core.engine.stores.base import RawPoint, SparseVector, set_from_payload, set_to_payload

DEFINITIONS = [
    set_to_payload("ns", "k", MemorySet(name="chat")),
    set_to_payload("ns", "k", MemorySet(name="wide", context_window=3)),
    set_to_payload("ns", "k", MemorySet(name="solo", context_window=0)),
]


def _id(n: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_OID, str(n)))


class _Source:
    """An earlier layout: points by id, read in id order."""

    name = "old"

    def __init__(self) -> None:
        rng = np.random.default_rng(1)
        self.held: dict[str, tuple[dict[str, Any], list[float] | None]] = {}
        for n in range(60):
            set_name = ("chat", "wide", "solo", "orphan")[n % 4]
            payload: dict[str, Any] = {"namespace": "ns", "key": "k", "set": set_name, "item_id": f"i{n}"}
            payload["seq"] = 1_763_866_000_123_456_789 + n // 8  # several points of a set share a seq
            if n % 11 == 10:
                self.held[_id(n)] = ({**payload, "tombstone": 1}, None)
                continue
            payload["value"] = {"role": "user", "content": f"turn {n}"} if n % 3 else f"the {n}th garden"
            dense = rng.standard_normal(8).astype(np.float16).tolist()  # stored float16, read as floats
            self.held[_id(n)] = (payload, dense)

    def keys(self) -> list[tuple[str, Mapping[str, Any]]]:
        return [(pid, self.held[pid][0]) for pid in sorted(self.held)]

    def points(self, ids: Sequence[str]) -> dict[str, tuple[dict[str, Any], list[float] | None]]:
        return {pid: self.held[pid] for pid in ids if pid in self.held}


class _Target:
    """A store being filled: what was copied, its records and set definitions; ``fail_at``: the copy_in call
    that raises."""

    def __init__(self, fail_at: int = 0) -> None:
        self.copied: dict[str, tuple[dict[str, Any], dict[str, SparseVector], list[float] | None]] = {}
        self.records: dict[str, dict[str, Any]] = {}
        self.sets: list[tuple[str, str, MemorySet]] = []
        self.calls, self.fail_at, self.reloads = 0, fail_at, 0

    def holds_collection(self, name: str) -> bool:
        return name == "old"

    def read_record(self, name: str) -> dict[str, Any] | None:
        return self.records.get(name)

    def write_record(self, name: str, payload: Mapping[str, Any]) -> None:
        self.records[name] = dict(payload)

    def copy_in(self, points: Sequence[tuple[RawPoint, Sequence[float] | None]]) -> int:
        self.calls += 1
        if self.calls == self.fail_at:
            raise StoreError("no space left on device")
        for point, dense in points:
            self.copied[point.id] = (point.payload, point.sparse, None if dense is None else list(dense))
        return len(points)

    def put_set(self, namespace: str, key: str, definition: MemorySet) -> None:
        self.sets.append((namespace, key, definition))

    def reload(self) -> None:
        self.reloads += 1


@pytest.fixture(autouse=True)
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(migration, "MIGRATION_BATCH", 7)
    monkeypatch.setattr(migration, "PROGRESS_EVERY", 0.0)
    monkeypatch.setattr(migration, "RELOAD_EVERY", 20)


def _migrated(source: _Source, target: _Target, spill: Path | None) -> int:
    if spill is None:
        return migration.migrate_layout(source, target, "new", DEFINITIONS)
    if not spill.exists():
        migration.spill_layout(source, spill)
    return migration.migrate_spilled(spill, source.name, target, "new", DEFINITIONS, reload=target.reload)


def test_a_migration_read_from_its_spill_file_copies_what_one_read_directly_does(tmp_path: Path):
    source = _Source()
    direct, spilled = _Target(), _Target()
    assert _migrated(source, direct, None) == _migrated(source, spilled, tmp_path / "spill") == len(source.held)
    assert spilled.copied == direct.copied  # payloads, BM25 vectors and float16 values exactly
    assert spilled.reloads == len(source.held) // 20
    assert spilled.sets == direct.sets == [("ns", "k", set_from_payload(p)) for p in DEFINITIONS]
    record = direct.records[migration.migration_record("new")]
    assert (record["state"], record["source"], record["total"]) == ("complete", "old", len(source.held))


@pytest.mark.parametrize("spilled", [False, True])
def test_a_migration_stopped_midway_resumes_from_its_record_and_copies_the_same(tmp_path: Path, spilled: bool):
    source, spill = _Source(), tmp_path / "spill" if spilled else None
    whole = _Target()
    _migrated(source, whole, None)
    resumed = _Target(fail_at=6)
    with pytest.raises(StoreError):
        _migrated(source, resumed, spill)
    record = resumed.records[migration.migration_record("new")]
    assert record["cursor"]["done"] == 5 * 7
    assert record["history"]  # it stopped inside a set: the next item's context takes texts copied before
    resumed.copied.clear()  # what the resumed run copies is all that counts: nothing is copied twice
    resumed.fail_at = 0
    _migrated(source, resumed, spill)
    assert len(resumed.copied) == len(source.held) - 5 * 7
    assert resumed.copied == {pid: held for pid, held in whole.copied.items() if pid in resumed.copied}
