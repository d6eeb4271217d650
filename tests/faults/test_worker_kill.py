"""SIGKILL the worker again and again during a load: every acknowledged write is there exactly once."""

from __future__ import annotations

import random
import re
import signal
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis

from memory_core import MemoryClient, MemoryCoreError
from memory_core.core.settings import Settings
from tests.integration.processes import celery_process
from tests.integration.waiting import broker_drained, wait_for

CLIENTS = 4
ITEMS_PER_CLIENT = 1250
BATCH = 25
KILLS = 20


@pytest.mark.timeout(600)
def test_twenty_sigkills_during_a_5000_item_load_lose_and_duplicate_nothing(fault_redis_url: str, tmp_path: Path):
    env = {
        "MEMORY_REDIS__URL": fault_redis_url,
        "MEMORY_QDRANT__PATH": str(tmp_path / "qdrant"),
        "MEMORY_CELERY__VISIBILITY_TIMEOUT": "8",  # a killed worker's tasks come back after 8 s
        "MEMORY_CELERY__RETRY_BACKOFF_MAX": "4",
        "MEMORY_CELERY__CONCURRENCY": "4",
    }
    settings = Settings(
        _env_file=None,
        redis={"url": fault_redis_url},
        celery={"visibility_timeout": 8, "retry_backoff_max": 4},
        client={"timeout": 180},
    )
    acknowledged: dict[str, str] = {}
    failed: list[BaseException] = []
    lock = threading.Lock()
    kills = 0

    with ExitStack() as stack:
        worker = stack.enter_context(celery_process("worker", env, tmp_path / "worker-0.log"))
        client = stack.enter_context(MemoryClient(settings))
        ltm = client.long_term("faults", "kill")
        notes = ltm.get_or_create_memory_set("notes", capacity=1_000_000, dedup="none")

        def load(n: int) -> None:
            for start in range(0, ITEMS_PER_CLIENT, BATCH):
                ids = [f"c{n}-{i}" for i in range(start, start + BATCH)]
                values = [f"client {n} fact {i}" for i in range(start, start + BATCH)]
                try:
                    notes.add(values, ids=ids)
                except MemoryCoreError as exc:  # not acknowledged: may or may not be stored
                    failed.append(exc)
                    continue
                with lock:
                    acknowledged.update(zip(ids, values, strict=True))

        clients = [threading.Thread(target=load, args=(n,)) for n in range(CLIENTS)]
        for thread in clients:
            thread.start()
        rng = random.Random(3)
        while kills < KILLS:
            time.sleep(rng.uniform(0.3, 1.2))
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            kills += 1
            worker = stack.enter_context(celery_process("worker", env, tmp_path / f"worker-{kills}.log"))
        for thread in clients:
            thread.join()

        broker = redis.Redis.from_url(fault_redis_url)
        wait_for(lambda: broker_drained(broker, settings), 120)
        items = notes.get()

    ids = [item.id for item in items]
    assert kills == KILLS
    assert len(ids) == len(set(ids)), "an item is stored twice"
    stored = {item.id: item.value for item in items}
    missing = set(acknowledged) - set(stored)
    assert not missing, f"{len(missing)} acknowledged items are missing, e.g. {sorted(missing)[:5]}"
    assert all(stored[i] == v for i, v in acknowledged.items())
    assert len(acknowledged) + BATCH * len(failed) >= CLIENTS * ITEMS_PER_CLIENT
    redelivered = _redelivered_tasks(tmp_path)
    assert redelivered > 0, "no kill landed mid-task; the test proved nothing"
    print(f"\nkills={kills} acknowledged={len(acknowledged)} stored={len(stored)} redelivered={redelivered}")


def _redelivered_tasks(logs: Path) -> int:
    """Task ids received by more than one worker incarnation: tasks a kill interrupted and the broker gave back."""
    seen: dict[str, int] = {}
    for log in logs.glob("worker-*.log"):
        for task_id in set(re.findall(r"Task memory\.add\[([0-9a-f-]+)\] received", log.read_text(errors="replace"))):
            seen[task_id] = seen.get(task_id, 0) + 1
    return sum(1 for count in seen.values() if count > 1)
