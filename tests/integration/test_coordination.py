"""Set size hints on a real Redis: a write far below capacity costs no exact count, and the trigger stays exact."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from memory_core.core.coordination import SIZE_HINT_TTL, Coordinator
from memory_core.core.keys import Keys
from memory_core.core.models import MemorySet, Scope
from memory_core.core.settings import LimitsSettings
from memory_core.engine.embedders.hashing import HashingEmbedder
from memory_core.engine.service import MemoryService
from memory_core.engine.stores.memory import InMemoryVectorStore

SCOPE = Scope("ns", "k", "notes")


class CountingStore(InMemoryVectorStore):
    """The in-memory store, noting every exact count it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.counts = 0

    def count(self, scope: Scope) -> int:
        self.counts += 1
        return super().count(scope)


@pytest.fixture
def coordinator(raw_redis: redis.Redis) -> Coordinator:
    return Coordinator(raw_redis, Keys("mctest"))


def test_a_hint_bounds_the_size_until_a_change_other_than_an_add_drops_it(coordinator: Coordinator):
    first = coordinator.grew(SCOPE, 4)
    assert first.bound is None  # a new hint: nothing counted yet
    coordinator.counted(SCOPE, first, 4)
    assert coordinator.grew(SCOPE, 3).bound == 7
    assert coordinator.grew(SCOPE, 1).bound == 8

    coordinator.bump(SCOPE)  # a delete, an import, a compaction
    assert coordinator.grew(SCOPE, 2).bound is None


def test_a_count_taken_under_a_dropped_hint_is_not_recorded(coordinator: Coordinator):
    hint = coordinator.grew(SCOPE, 5)
    coordinator.bump(SCOPE)  # e.g. an import lands between the add's count and its record
    coordinator.counted(SCOPE, hint, 5)
    assert coordinator.grew(SCOPE, 1).bound is None


def test_adds_summed_after_a_count_began_stay_in_the_bound(coordinator: Coordinator):
    mine = coordinator.grew(SCOPE, 2)
    coordinator.grew(SCOPE, 3)  # another worker's add, summed after mine and maybe not in my count
    coordinator.counted(SCOPE, mine, 2)
    assert coordinator.grew(SCOPE, 0).bound == 5  # my 2 counted, their 3 still added on top


def test_of_two_counts_recorded_in_any_order_the_one_covering_more_adds_is_the_base(coordinator: Coordinator):
    first = coordinator.grew(SCOPE, 2)
    second = coordinator.grew(SCOPE, 3)  # duplicates of the first two: the set still holds 2 items
    coordinator.counted(SCOPE, second, 2)  # two workers counted at once; the later count covers 5 adds
    coordinator.counted(SCOPE, first, 2)  # the earlier one, recorded last, covers only 2
    assert coordinator.grew(SCOPE, 0).bound == 2  # 2 counted + 0 added since the covering count


def test_a_hint_is_trusted_for_a_limited_time(coordinator: Coordinator, raw_redis: redis.Redis):
    coordinator.counted(SCOPE, coordinator.grew(SCOPE, 1), 1)
    ttl = raw_redis.ttl(Keys("mctest").size_hint(*SCOPE))
    assert 0 < ttl <= SIZE_HINT_TTL


def test_the_hints_of_two_namespaces_never_mix(coordinator: Coordinator):
    other = Scope("other", "k", "notes")
    coordinator.counted(SCOPE, coordinator.grew(SCOPE, 900), 900)
    assert coordinator.grew(other, 1).bound is None
    assert coordinator.grew(SCOPE, 0).bound == 900


def _add(*ids: str) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat()
    items = [{"id": i, "value": f"note {i}", "created_time": now, "seq": int(i)} for i in ids]
    return {"v": 1, "namespace": "ns", "key": "k", "set_name": "notes", "items": items}


def test_capacity_is_checked_by_exact_count_only_near_capacity_and_triggers_on_the_filling_write(
    coordinator: Coordinator,
):
    store, triggered = CountingStore(), list[Scope]()
    service = MemoryService(
        store=store,
        embedder=HashingEmbedder(),
        limits=LimitsSettings(),
        on_capacity=triggered.append,
        coordinator=coordinator,
    )
    definition = MemorySet(name="notes", capacity=6)
    service.create_set({"v": 1, "namespace": "ns", "key": "k", "definition": definition.model_dump(mode="json")})

    service.add(_add("1"))  # no hint yet: counted exactly
    service.add(_add("2"))
    service.add(_add("3"))
    assert store.counts == 1, "writes far below capacity must not count the set"

    service.delete({"v": 1, "namespace": "ns", "key": "k", "set_name": "notes", "ids": ["3"]})
    counts = store.counts  # the delete counts what it removes; that is not the capacity check
    service.add(_add("4"))  # the delete dropped the hint: counted again (3 items)
    assert store.counts == counts + 1
    service.add(_add("5"))  # bound 4
    service.add(_add("6"))  # bound 5
    assert store.counts == counts + 1
    assert not triggered
    service.add(_add("7"))  # bound 6 = capacity: counted, and 6 items are there
    assert store.counts == counts + 2
    assert triggered == [SCOPE]
