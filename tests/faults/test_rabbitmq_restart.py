"""Restart the RabbitMQ broker twice during a load (a clean stop, then a SIGKILL): nothing acknowledged is lost.

The node is one of the test's own, on spare ports, never the shared one. Its task queues are durable quorum
queues and every publish is confirmed, so a task the broker confirmed survives the restart and runs once the
worker has reconnected. Calls made while it is down fail with ``BrokerUnavailable`` (typed), or ride it out.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from memory_core import MemoryClient, MemoryCoreError
from memory_core.core.settings import Settings
from tests.integration.processes import RabbitNode, celery_process, rabbitmq_missing, rabbitmq_vhost
from tests.integration.waiting import rabbitmq_drained, wait_for

CLIENTS = 3
BATCH = 20
RUN_BEFORE_RESTART = 6.0  # seconds of load before each restart, and after the last one


@pytest.fixture
def rabbit_node(tmp_path: Path) -> Iterator[RabbitNode]:
    reason = rabbitmq_missing()
    if reason is not None:
        pytest.skip(f"RabbitMQ broker tests need a RabbitMQ: {reason}")
    try:
        node = RabbitNode(tmp_path / "rabbit")
    except FileNotFoundError:
        pytest.skip("rabbitmq-server is not installed: this test starts a RabbitMQ node of its own")
    node.start()
    try:
        yield node
    finally:
        node.stop(kill=True)


@pytest.mark.timeout(420)
def test_broker_restarts_mid_load_lose_and_duplicate_no_acknowledged_add(
    rabbit_node: RabbitNode, fault_redis_url: str, tmp_path: Path
):
    began = time.monotonic()
    acknowledged: dict[str, str] = {}
    failures: list[BaseException] = []
    lock = threading.Lock()
    loading = threading.Event()
    restarts: list[tuple[str, float]] = []  # (how, seconds until it accepted connections again)
    stops: list[float] = []  # when each restart began
    spans: list[tuple[float, float]] = []  # when each acknowledged call began and ended

    with ExitStack() as stack:
        url = stack.enter_context(rabbitmq_vhost(f"memory-core-test-{uuid.uuid4().hex[:12]}", node=rabbit_node))
        env = {
            "MEMORY_REDIS__URL": fault_redis_url,
            "MEMORY_CELERY__BROKER_URL": url,
            "MEMORY_QDRANT__PATH": str(tmp_path / "qdrant"),
            "MEMORY_CELERY__CONCURRENCY": "4",
            "MEMORY_CELERY__RETRY_BACKOFF_MAX": "4",
        }
        settings = Settings(
            _env_file=None, redis={"url": fault_redis_url}, celery={"broker_url": url}, client={"timeout": 120}
        )
        stack.enter_context(celery_process("worker", env, tmp_path / "worker.log"))
        client = stack.enter_context(MemoryClient(settings))
        notes = client.long_term("faults", "rabbit").get_or_create_memory_set("notes", capacity=1_000_000, dedup="none")

        def load(n: int) -> None:
            batch = 0
            while loading.is_set():
                ids = [f"c{n}-{batch}-{i}" for i in range(BATCH)]
                values = [f"client {n} fact {batch}-{i}" for i in range(BATCH)]
                batch += 1
                called = time.monotonic()
                try:
                    notes.add(values, ids=ids)
                except MemoryCoreError as exc:  # not acknowledged: may or may not be stored
                    failures.append(exc)
                    time.sleep(0.2)
                    continue
                except Exception as exc:  # noqa: BLE001  # the point: an untyped error reaching a caller fails the test
                    failures.append(exc)
                    return
                with lock:
                    acknowledged.update(zip(ids, values, strict=True))
                    spans.append((called, time.monotonic()))

        loading.set()
        threads = [threading.Thread(target=load, args=(n,)) for n in range(CLIENTS)]
        for thread in threads:
            thread.start()
        try:
            for kill in (False, True):
                time.sleep(RUN_BEFORE_RESTART)
                stops.append(time.monotonic())
                rabbit_node.stop(kill=kill)
                restarts.append(("SIGKILL" if kill else "stop", rabbit_node.start()))
            before_last = len(acknowledged)
            time.sleep(RUN_BEFORE_RESTART)
            wait_for(lambda: len(acknowledged) > before_last, 90, interval=0.2)  # the load goes on after it
        finally:
            loading.clear()
            for thread in threads:
                thread.join()

        wait_for(lambda: rabbitmq_drained(url.rsplit("/", 1)[1], node=rabbit_node), 120, interval=0.5)
        items = notes.get()

    stored = {item.id: item.value for item in items}
    untyped = [exc for exc in failures if not isinstance(exc, MemoryCoreError)]
    across = sum(1 for began_at, ended in spans if any(began_at < stop < ended for stop in stops))
    print(
        f"\nrestarts={restarts} acknowledged={len(acknowledged)} acknowledged_across_a_restart={across} "
        f"stored={len(stored)} failed_calls={len(failures)} "
        f"errors={sorted({type(exc).__name__ for exc in failures})} seconds={time.monotonic() - began:.0f}"
    )
    assert not untyped, f"callers saw errors outside MemoryCoreError: {untyped[:3]}"
    assert len(items) == len(stored), "an item is stored twice"
    missing = set(acknowledged) - set(stored)
    assert not missing, f"{len(missing)} acknowledged items are missing, e.g. {sorted(missing)[:5]}"
    assert all(stored[i] == v for i, v in acknowledged.items())
    assert len(restarts) == 2
    assert across > 0, "no acknowledged call was in flight when the broker went down; the test proved nothing"
