"""Two beats and two workers race compaction triggers: one compaction per set at a time, nothing lost or doubled.

The embedded engine belongs to one process, so the two workers are two Celery nodes in
this process (each its own consumer and thread pool) sharing it. They coordinate only
through Redis, exactly as workers on separate hosts sharing a Qdrant server would.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis

from memory_core import CompactionConfig, MemoryClient
from memory_core.core import routing
from memory_core.core.settings import Settings
from memory_core.testing.fake_anthropic import FakeAnthropic
from memory_core.workers import services
from memory_core.workers.app import create_app
from tests.integration.in_thread import in_thread_worker
from tests.integration.processes import celery_process
from tests.integration.waiting import wait_for

SETS = 3
WRITERS = 4
BATCHES = 12  # per writer and set, of 3 items: 144 items per set
CAPACITY = 10


@pytest.mark.timeout(300)
def test_two_beats_and_two_workers_run_one_compaction_per_set_at_a_time(fault_redis_url: str, tmp_path: Path):
    prefix = "mcrace"
    beat_env = {
        "MEMORY_REDIS__URL": fault_redis_url,
        "MEMORY_REDIS__KEY_PREFIX": prefix,
        "MEMORY_QDRANT__PATH": str(tmp_path / "unused"),  # beat never opens the store
        "MEMORY_COMPACTION__SWEEP_INTERVAL": "1",
        "MEMORY_MAINTENANCE__TTL_SWEEP_INTERVAL": "3600",
        "MEMORY_MAINTENANCE__FLUSH_ACCESS_INTERVAL": "3600",
        "MEMORY_MAINTENANCE__EVICT_INTERVAL": "3600",
    }
    with FakeAnthropic() as fake, ExitStack() as stack:
        fake.behave("stall", stall_seconds=0.3)  # each model call holds its set's lock a while
        settings = Settings(
            _env_file=None,
            redis={"url": fault_redis_url, "key_prefix": prefix},
            qdrant={"backend": "edge", "path": tmp_path / "qdrant"},
            anthropic={"api_key": "sk-ant-test-not-real", "base_url": fake.url, "max_retries": 0, "timeout": 10},
            client={"timeout": 120},
        )
        app = create_app(settings)
        stack.callback(services.close, app)
        for n in (1, 2):
            stack.enter_context(in_thread_worker(app, concurrency=2, hostname=f"race{n}@test", shutdown_timeout=60))
        for n in (1, 2):
            schedule = str(tmp_path / f"beat-{n}-schedule")
            stack.enter_context(celery_process("beat", beat_env, tmp_path / f"beat-{n}.log", "--schedule", schedule))
        client = stack.enter_context(MemoryClient(settings))
        sets = [
            client.long_term(f"race-{k}", "u").get_or_create_memory_set(
                "notes", capacity=CAPACITY, dedup="none", compaction_config=CompactionConfig(model=f"race-{k}")
            )
            for k in range(SETS)
        ]
        added: dict[int, set[str]] = defaultdict(set)
        lock = threading.Lock()

        def write(writer: int) -> None:
            rng = random.Random(writer)
            for batch in range(BATCHES):
                for k, memory_set in enumerate(sets):
                    values = [f"set {k} writer {writer} batch {batch} fact {i}" for i in range(3)]
                    ids = memory_set.add(values)  # capacity triggers race the beats' sweeps
                    with lock:
                        added[k].update(ids)
                    if rng.random() < 0.15:
                        memory_set.compact()  # and a forced compaction from a client

        writers = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
        for thread in writers:
            thread.start()
        for thread in writers:
            thread.join()

        broker = redis.Redis.from_url(fault_redis_url)
        stack.callback(broker.close)
        locks = [client.keys.compaction_lock(f"race-{k}", "u", "notes") for k in range(SETS)]

        def settled() -> bool:
            return (
                all(memory_set.size() <= CAPACITY for memory_set in sets)
                and broker.llen(routing.COMPACTION_QUEUE) == 0
                and not any(broker.exists(key) for key in locks)
            )

        wait_for(settled, 120)
        final = {k: memory_set.get() for k, memory_set in enumerate(sets)}
        usage = {k: client.usage(f"race-{k}") for k in range(SETS)}
        spans = list(fake.spans)
        max_in_flight = fake.max_in_flight

    by_set = _assert_no_set_compacted_twice_at_once(spans)
    assert max_in_flight >= 2, "compactions never ran in parallel; the race was not exercised"
    for k in range(SETS):
        ids = [item.id for item in final[k]]
        assert len(ids) == len(set(ids))
        assert len(added[k]) == WRITERS * BATCHES * 3
        raw = {item.id for item in final[k] if not item.compacted}
        assert raw <= added[k]
        # Every item added is either still there or was folded exactly once: a doubled fold breaks this.
        assert len(final[k]) == len(added[k]) - usage[k].items_folded + usage[k].summaries_written, usage[k]
        assert usage[k].compactions >= 2
    print(f"\nmodel calls per set: { {m: len(c) for m, c in sorted(by_set.items())} }, max in flight {max_in_flight}")


def _assert_no_set_compacted_twice_at_once(
    spans: list[tuple[str, float, float]],
) -> dict[str, list[tuple[float, float]]]:
    """Groups the model calls by set (each set has its own model name) and checks none overlap within a set."""
    by_set: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for model, started, ended in spans:
        by_set[model].append((started, ended))
    for model, calls in by_set.items():
        calls.sort()
        overlapping = [(a, b) for a, b in itertools.pairwise(calls) if b[0] < a[1]]
        assert not overlapping, f"{model}: {len(overlapping)} model calls overlapped another of the same set"
    return by_set
