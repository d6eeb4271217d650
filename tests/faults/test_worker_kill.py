"""SIGKILL the worker again and again during a load: every acknowledged write is there exactly once.

Runs on each broker. On RabbitMQ (durable quorum queues, publisher confirms, late acks) there is no
window in which a killed worker holds a message the broker has forgotten, so every ``add(wait=False)``
the broker accepted during the kills is stored too. On Redis that is not promised (kombu pops a message,
then records it unacknowledged: a kill between the two loses it), so there it is only counted.
"""

from __future__ import annotations

import random
import re
import signal
import threading
import time
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path

import pytest

from memory_core import MemoryClient, MemoryCoreError, MemorySet
from memory_core.core.settings import Settings
from tests.faults.conftest import FaultBroker
from tests.integration.processes import celery_process
from tests.integration.waiting import wait_for

CLIENTS = 4
ITEMS_PER_CLIENT = 1250
BATCH = 25
KILLS = 20
UNWAITED_BATCHES = 80


@pytest.mark.timeout(600)
def test_twenty_sigkills_during_a_5000_item_load_lose_and_duplicate_nothing(
    fault_broker: FaultBroker, fault_redis_url: str, tmp_path: Path
):
    began = time.monotonic()
    env = {
        "MEMORY_REDIS__URL": fault_redis_url,
        "MEMORY_QDRANT__PATH": str(tmp_path / "qdrant"),
        "MEMORY_CELERY__VISIBILITY_TIMEOUT": "8",  # a killed worker's tasks come back after 8 s (Redis)
        "MEMORY_CELERY__RETRY_BACKOFF_MAX": "4",
        "MEMORY_CELERY__CONCURRENCY": "4",
        **fault_broker.env(),
    }
    settings = Settings(
        _env_file=None,
        redis={"url": fault_redis_url},
        celery={
            "visibility_timeout": 8,
            "retry_backoff_max": 4,
            "broker_url": fault_broker.url if fault_broker.vhost else None,
        },
        # A worker started again on a loaded machine can take longer than the default grace to consume: the calls
        # made meanwhile wait for it rather than report no worker (this test is about what is lost, not about that).
        client={"timeout": 180, "worker_grace": 120},
    )
    acknowledged: dict[str, str] = {}
    unwaited: dict[str, str] = {}  # accepted by the broker with add(wait=False)
    failed: list[BaseException] = []
    unwaited_failed: list[BaseException] = []  # kept apart: they carry no part of the 5,000-item load
    lock = threading.Lock()
    killing = threading.Event()
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

        killing.set()
        clients = [threading.Thread(target=load, args=(n,)) for n in range(CLIENTS)]
        clients.append(
            threading.Thread(target=_add_without_waiting, args=(notes, killing, unwaited, unwaited_failed, lock))
        )
        for thread in clients:
            thread.start()
        rng = random.Random(3)
        while kills < KILLS:
            time.sleep(rng.uniform(0.3, 1.2))
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            kills += 1
            worker = stack.enter_context(celery_process("worker", env, tmp_path / f"worker-{kills}.log"))
        killing.clear()
        for thread in clients:
            thread.join()

        wait_for(lambda: fault_broker.drained(settings), 120, interval=0.5)
        items = notes.get()

    ids = [item.id for item in items]
    stored = {item.id: item.value for item in items}
    unwaited_stored = len(set(unwaited) & set(stored))
    redelivered = _redelivered_tasks(tmp_path)
    print(
        f"\n[{fault_broker.name}] kills={kills} acknowledged={len(acknowledged)} failed_calls={len(failed)}+{len(unwaited_failed)} "
        f"stored={len(stored)} redelivered={redelivered} wait_false_sent={len(unwaited)} "
        f"wait_false_stored={unwaited_stored} seconds={time.monotonic() - began:.0f}"
    )
    assert kills == KILLS
    assert len(ids) == len(set(ids)), "an item is stored twice"
    missing = set(acknowledged) - set(stored)
    assert not missing, f"{len(missing)} acknowledged items are missing, e.g. {sorted(missing)[:5]}"
    assert all(stored[i] == v for i, v in acknowledged.items())
    assert len(acknowledged) + BATCH * len(failed) >= CLIENTS * ITEMS_PER_CLIENT
    assert redelivered > 0, "no kill landed mid-task; the test proved nothing"
    assert len(unwaited) >= BATCH * 10, "too few add(wait=False) calls were made during the kills"
    if fault_broker.vhost is not None:
        _assert_no_loss_window(stored, unwaited, failed + unwaited_failed)


def _add_without_waiting(
    notes: MemorySet,
    killing: threading.Event,
    unwaited: dict[str, str],
    failed: list[BaseException],
    lock: threading.Lock,
) -> None:
    """``add(wait=False)`` batches while the kills go on: each sent while some worker incarnation is up, or dying."""
    for batch in range(UNWAITED_BATCHES):
        if not killing.is_set():
            break
        ids = [f"nw-{batch}-{i}" for i in range(BATCH)]
        values = [f"unwaited fact {batch}-{i}" for i in range(BATCH)]
        try:
            notes.add(values, ids=ids, wait=False)
        except MemoryCoreError as exc:  # the broker did not accept it: nothing promised
            failed.append(exc)
        else:
            with lock:
                unwaited.update(zip(ids, values, strict=True))
        time.sleep(0.7)


def _assert_no_loss_window(stored: Mapping[str, object], unwaited: dict[str, str], failed: list[BaseException]) -> None:
    # RabbitMQ: what the broker confirmed is stored, waited for or not, and with the broker up no call failed.
    lost = set(unwaited) - set(stored)
    assert not lost, f"{len(lost)} add(wait=False) items the broker accepted are missing, e.g. {sorted(lost)[:5]}"
    assert all(stored[i] == v for i, v in unwaited.items())
    assert not failed, f"calls failed with RabbitMQ up all along: {failed[:3]}"


def _redelivered_tasks(logs: Path) -> int:
    """Task ids received by more than one worker incarnation: tasks a kill interrupted and the broker gave back."""
    seen: dict[str, int] = {}
    for log in logs.glob("worker-*.log"):
        for task_id in set(re.findall(r"Task memory\.add\[([0-9a-f-]+)\] received", log.read_text(errors="replace"))):
            seen[task_id] = seen.get(task_id, 0) + 1
    return sum(1 for count in seen.values() if count > 1)
