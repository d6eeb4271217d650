"""Per-namespace quotas on a real Redis: items, bytes and write rate, shared by workers, and through a real worker."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import REGISTRY

from memory_core import MemoryClient, QuotaExceeded
from memory_core.core.keys import Keys
from memory_core.core.models import MemorySet, MemorySetItem, Scope
from memory_core.core.settings import LimitsSettings, QuotaSettings
from memory_core.engine.embedders.hashing import HashingEmbedder
from memory_core.engine.quotas import QuotaGuard
from memory_core.engine.service import MemoryService
from memory_core.engine.stores.memory import InMemoryVectorStore
from memory_core.workers import services
from memory_core.workers.app import create_app
from tests.integration.conftest import make_settings
from tests.integration.in_thread import in_thread_worker


def _service(raw_redis: redis.Redis, store: InMemoryVectorStore, **quotas: Any) -> MemoryService:
    guard = QuotaGuard(
        settings=QuotaSettings(**quotas), store=store, client=raw_redis, keys=Keys("mctest"), max_items_per_call=1000
    )
    return MemoryService(store=store, embedder=HashingEmbedder(), limits=LimitsSettings(), quotas=guard)


def _create(service: MemoryService, namespace: str = "ns", name: str = "notes") -> None:
    definition = MemorySet(name=name, capacity=10_000).model_dump(mode="json")
    service.create_set({"v": 1, "namespace": namespace, "key": "k", "definition": definition})


def _add(service: MemoryService, ids: list[str], value: str = "x", namespace: str = "ns", name: str = "notes") -> None:
    now = datetime.now(UTC).isoformat()
    items = [{"id": i, "value": f"{value} {i}", "created_time": now, "seq": time.time_ns()} for i in ids]
    service.add({"v": 1, "namespace": namespace, "key": "k", "set_name": name, "items": items})


def _size(service: MemoryService, namespace: str = "ns", name: str = "notes") -> int:
    return service.size({"v": 1, "namespace": namespace, "key": "k", "set_name": name}).count


def _refusals(quota: str) -> float:
    return REGISTRY.get_sample_value("memory_core_quota_refusals_total", {"quota": quota}) or 0.0


def test_an_items_quota_refuses_what_would_go_over_and_writes_nothing_of_it(raw_redis: redis.Redis):
    service = _service(raw_redis, InMemoryVectorStore(), items=5)
    _create(service)
    _create(service, name="other")  # the quota is the namespace's, across its sets
    _add(service, ["a", "b", "c"])
    _add(service, ["d"], name="other")
    before = _refusals("items")
    with pytest.raises(QuotaExceeded, match=r"namespace 'ns' is at its quota of 5 long-term items \(4 held\)"):
        _add(service, ["e", "f"])
    assert _size(service) == 3
    assert _refusals("items") == before + 1
    _add(service, ["e"])  # exactly at the limit
    _add(service, ["a", "b"], value="changed")  # replacing stored items adds none
    assert _size(service) + _size(service, name="other") == 5


def test_quotas_are_per_namespace_and_overrides_replace_the_defaults(raw_redis: redis.Redis):
    service = _service(raw_redis, InMemoryVectorStore(), items=2, namespaces={"big": {"items": 4}, "free": {}})
    for namespace in ("ns", "big", "free"):
        _create(service, namespace)
    _add(service, ["a", "b"])
    _add(service, ["a", "b", "c", "d"], namespace="big")
    _add(service, [str(i) for i in range(50)], namespace="free")
    with pytest.raises(QuotaExceeded, match="'ns'"):
        _add(service, ["c"])
    with pytest.raises(QuotaExceeded, match="'big' is at its quota of 4"):
        _add(service, ["e"], namespace="big")


def test_a_bytes_quota_counts_values_and_metadata(raw_redis: redis.Redis):
    service = _service(raw_redis, InMemoryVectorStore(), bytes=100)
    _create(service)
    _add(service, ["a"], value="y" * 60)  # 60 + " a" + quotes = 64 bytes, metadata {} = 2
    with pytest.raises(QuotaExceeded, match=r"quota of 100 bytes \(66 held\).*MEMORY_QUOTAS__BYTES"):
        _add(service, ["b"], value="y" * 40)
    _add(service, ["b"], value="y" * 20)
    _add(service, ["a"], value="short")  # a smaller replacement frees room at once
    _add(service, ["c"], value="y" * 30)


def test_room_freed_by_a_delete_is_counted_at_the_next_recount(raw_redis: redis.Redis):
    service = _service(raw_redis, InMemoryVectorStore(), items=3, recount_interval=0.5)
    _create(service)
    _add(service, ["a", "b", "c"])
    service.delete({"v": 1, "namespace": "ns", "key": "k", "set_name": "notes", "ids": ["a", "b"]})
    with pytest.raises(QuotaExceeded):  # until the next count, the delete frees nothing
        _add(service, ["d", "e"])
    time.sleep(0.6)
    _add(service, ["d", "e"])
    assert _size(service) == 3


def test_the_write_rate_is_a_bucket_that_refills(raw_redis: redis.Redis):
    service = _service(raw_redis, InMemoryVectorStore(), writes_per_second=10, burst=5)
    _create(service)
    _add(service, ["a", "b", "c", "d", "e"])
    before = _refusals("writes_per_second")
    with pytest.raises(QuotaExceeded, match=r"over its write rate of 10 items/s \(burst 5\).*retry in 0\.\d s"):
        _add(service, ["f", "g", "h", "i", "j"])  # a whole burst: refused until half a second has refilled it
    assert _refusals("writes_per_second") == before + 1
    with pytest.raises(QuotaExceeded, match="larger than its write burst of 5 items.*split it"):
        _add(service, [str(i) for i in range(6)])
    time.sleep(0.25)  # 2.5 tokens back
    _add(service, ["f", "g"])
    assert _size(service) == 7


def test_workers_admitting_at_once_never_take_a_namespace_over(raw_redis: redis.Redis):
    store = InMemoryVectorStore()
    workers = [_service(raw_redis, store, items=40) for _ in range(4)]
    _create(workers[0])
    admitted: list[str] = []
    lock = threading.Lock()

    def load(n: int) -> None:
        for i in range(25):
            try:
                _add(workers[n], [f"w{n}-{i}"])
            except QuotaExceeded:
                continue
            with lock:
                admitted.append(f"w{n}-{i}")

    threads = [threading.Thread(target=load, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(admitted) == 40
    assert _size(workers[0]) == 40


def test_a_worker_that_reaches_the_count_lock_just_after_another_count_keeps_that_count(
    raw_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
):
    store = InMemoryVectorStore()
    first = QuotaGuard(
        settings=QuotaSettings(items=1), store=store, client=raw_redis, keys=Keys("mctest"), max_items_per_call=1000
    )
    late = _service(raw_redis, store, items=1)
    _create(late)
    now = datetime.now(UTC)
    in_flight = MemorySetItem(memory_set_name="notes", id="x", value="x", created_time=now, last_accessed_time=now)
    take_lock = raw_redis.set

    def count_and_admit_first(*args: Any, **kwargs: Any) -> Any:
        # Between the late worker's read of the namespace's usage (never counted) and its lock, the first
        # worker counts the namespace and admits an add that it is still writing.
        monkeypatch.setattr(raw_redis, "set", take_lock)
        first.admit(Scope("ns", "k", "notes"), [in_flight])
        return take_lock(*args, **kwargs)

    monkeypatch.setattr(raw_redis, "set", count_and_admit_first)
    recounts = REGISTRY.get_sample_value("memory_core_quota_recount_seconds_count") or 0.0
    with pytest.raises(QuotaExceeded, match=r"quota of 1 long-term items \(1 held\)"):
        _add(late, ["y"])  # a count taken again now would miss the add in flight and let this one over
    assert REGISTRY.get_sample_value("memory_core_quota_recount_seconds_count") == recounts + 1
    assert _size(late) == 0


@pytest.fixture
def quota_worker(redis_url: str, tmp_path: Path) -> Iterator[MemoryClient]:
    settings = make_settings(
        redis_url,
        tmp_path / "qdrant",
        redis={"url": redis_url, "key_prefix": "mcquota"},  # queues of its own: the session's worker takes none
        embedder={"model": "hashing"},
        quotas={"namespaces": {"small": {"items": 2}}, "writes_per_second": 1000},
    )
    app = create_app(settings)
    with in_thread_worker(app, concurrency=2), MemoryClient(settings) as client:
        yield client
    services.close(app)


def test_a_client_hears_quota_exceeded_and_it_is_no_dead_letter(quota_worker: MemoryClient, raw_redis: redis.Redis):
    small = quota_worker.long_term("small", "k").get_or_create_memory_set("notes", capacity=100)
    small.add(["one", "two"], ids=["1", "2"])
    with pytest.raises(QuotaExceeded, match="namespace 'small' is at its quota of 2"):
        small.add(["three"], ids=["3"])
    assert sorted(item.id for item in small.get()) == ["1", "2"]
    assert raw_redis.llen(quota_worker.keys.dead_letters("small")) == 0
    other = quota_worker.long_term("other", "k").get_or_create_memory_set("notes", capacity=100)
    other.add(["a", "b", "c"])  # only "small" has an item quota
    assert len(other.get()) == 3
