"""Redis (broker, replies, caches) restarted with AOF on: queued tasks survive, no acknowledged add is lost.

The server is test-owned, on a spare port, with ``appendfsync always``: what Redis
acknowledged is on disk, so a SIGKILL of Redis is a fair test of everything above it.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis

from memory_core import MemoryClient, MemoryCoreError
from memory_core.core.settings import Settings
from tests.integration.processes import celery_process, free_port, start_redis, stop
from tests.integration.waiting import broker_drained, wait_for

CLIENTS = 3
RESTARTS = 3


def _aof(data: Path) -> tuple[str, ...]:
    data.mkdir(exist_ok=True)
    return ("--appendonly", "yes", "--appendfsync", "always", "--dir", str(data))


def _setup(tmp_path: Path) -> tuple[int, dict[str, str], Settings]:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    env = {
        "MEMORY_REDIS__URL": url,
        "MEMORY_QDRANT__PATH": str(tmp_path / "qdrant"),
        "MEMORY_REDIS__SOCKET_TIMEOUT": "2",
        # A task cancelled by the lost connection comes back after 6 s.
        "MEMORY_CELERY__VISIBILITY_TIMEOUT": "6",
        "MEMORY_CELERY__RETRY_BACKOFF_MAX": "2",
        "MEMORY_CELERY__CONCURRENCY": "4",  # few tasks in flight per restart: what this test was validated with
    }
    settings = Settings(
        _env_file=None,
        redis={"url": url, "socket_timeout": 2},
        celery={"visibility_timeout": 6, "retry_backoff_max": 2},
        client={"timeout": 30},
    )
    return port, env, settings


@pytest.mark.timeout(300)
def test_tasks_queued_before_a_restart_run_after_it(tmp_path: Path):
    port, env, settings = _setup(tmp_path)
    aof = _aof(tmp_path / "redis-data")
    server = start_redis(port, tmp_path / "redis.log", *aof)
    try:
        with MemoryClient(settings) as client:
            ltm = client.long_term("restart", "queued")
            with celery_process("worker", env, tmp_path / "worker-0.log"):
                memory_set = ltm.get_or_create_memory_set("notes", capacity=1_000_000, dedup="none")
            receipts = [ltm.submit(memory_set, [f"queued fact {n}-{i}" for i in range(5)]) for n in range(20)]

            stop(server)  # nothing consumed them: the 20 messages are only in Redis (and its AOF)
            server = start_redis(port, tmp_path / "redis.log", *aof)
            with celery_process("worker", env, tmp_path / "worker-1.log"):
                written = [receipt.wait() for receipt in receipts]
                stored = {item.id: item.value for item in memory_set.get()}
    finally:
        stop(server)
    expected = {id_: f"queued fact {n}-{i}" for n, ids in enumerate(written) for i, id_ in enumerate(ids)}
    assert len(expected) == 100
    assert stored == expected


@pytest.mark.timeout(420)
def test_sigkilled_redis_under_load_loses_no_acknowledged_add(tmp_path: Path):
    port, env, settings = _setup(tmp_path)
    aof = _aof(tmp_path / "redis-data")
    server = start_redis(port, tmp_path / "redis.log", *aof)
    acknowledged: dict[str, str] = {}
    typed_errors: list[MemoryCoreError] = []
    untyped: list[Exception] = []
    acknowledged_after_last_restart = 0
    last_restart_done = threading.Event()
    stop_load = threading.Event()
    lock = threading.Lock()

    try:
        with ExitStack() as stack:
            stack.enter_context(celery_process("worker", env, tmp_path / "worker.log"))
            client = stack.enter_context(MemoryClient(settings))
            memory_set = client.long_term("restart", "load").get_or_create_memory_set(
                "notes", capacity=1_000_000, dedup="none"
            )

            def load(n: int) -> None:
                nonlocal acknowledged_after_last_restart
                rng = random.Random(n)
                batch = 0
                while not stop_load.is_set():
                    batch += 1
                    values = [f"client {n} batch {batch} fact {i}" for i in range(5)]
                    try:
                        ids = memory_set.add(values)
                        if rng.random() < 0.3:
                            memory_set.search(values[0], limit=3)
                        if rng.random() < 0.3:
                            memory_set.get(ids)
                    except MemoryCoreError as exc:  # typed: BrokerUnavailable, ReplyTimeout, ...
                        with lock:
                            typed_errors.append(exc)
                        time.sleep(0.2)
                        continue
                    except Exception as exc:  # noqa: BLE001  # anything else is a defect, collected and reported
                        with lock:
                            untyped.append(exc)
                        return
                    with lock:
                        acknowledged.update(zip(ids, values, strict=True))
                        if last_restart_done.is_set():
                            acknowledged_after_last_restart += 1

            threads = [threading.Thread(target=load, args=(n,)) for n in range(CLIENTS)]
            for thread in threads:
                thread.start()
            for _ in range(RESTARTS):
                time.sleep(3)
                server.send_signal(signal.SIGKILL)
                server.wait()
                server = start_redis(port, tmp_path / "redis.log", *aof)
            last_restart_done.set()
            wait_for(lambda: acknowledged_after_last_restart >= 5, 90)
            stop_load.set()
            for thread in threads:
                thread.join()

            broker = redis.Redis(port=port)
            wait_for(lambda: broker_drained(broker, settings), 120)
            broker.close()
            items = memory_set.get()
    finally:
        stop(server)

    assert not untyped, f"untyped errors reached the caller: {untyped[:3]}"
    ids = [item.id for item in items]
    assert len(ids) == len(set(ids)), "an item is stored twice"
    stored = {item.id: item.value for item in items}
    missing = set(acknowledged) - set(stored)
    assert not missing, f"{len(missing)} acknowledged items are missing, e.g. {sorted(missing)[:5]}"
    assert all(stored[id_] == value for id_, value in acknowledged.items())
    kinds = sorted({type(exc).__name__ for exc in typed_errors})
    print(f"\nrestarts={RESTARTS} acknowledged={len(acknowledged)} stored={len(stored)} typed errors={kinds}")
