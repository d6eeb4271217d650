"""Callers learn within seconds that no worker listens; ``status`` and ``up`` see every live worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from celery import Celery

from memory_core import MemoryClient, MemorySet, NoWorkerAvailable, ReplyTimeout
from memory_core.core import routing
from memory_core.core.keys import Keys
from memory_core.core.liveness import consumers, live_workers
from memory_core.core.settings import Settings
from memory_core.workers import services
from memory_core.workers.app import create_app

from .conftest import make_settings
from .in_thread import in_thread_worker
from .processes import ROOT, PrivateRedis, celery_process
from .waiting import queued_tasks, wait_for


@pytest.fixture
def nobody(redis_url: str, tmp_path: Path) -> Settings:
    """A deployment (its own key prefix on the test DB) that no worker serves."""
    return make_settings(redis_url, tmp_path, redis={"url": redis_url, "key_prefix": "mcnobody"})


def test_with_no_worker_a_call_fails_within_seconds_naming_the_queue_and_enqueues_nothing(nobody: Settings):
    broker = redis.Redis.from_url(nobody.broker_url)
    with MemoryClient(nobody) as client:
        ltm = client.long_term("acme", "u")
        notes = MemorySet(name="notes")
        calls = {
            "add": (lambda: ltm.add(notes, ["x"]), routing.WRITE_QUEUE),
            "search": (lambda: ltm.search(notes, "x"), routing.READ_QUEUE),
            "size": (lambda: ltm.size(notes), routing.READ_QUEUE),
            "recall": (lambda: client.recall("acme", "u", "x"), routing.READ_QUEUE),
        }
        for name, (call, queue) in calls.items():
            started = time.monotonic()
            with pytest.raises(NoWorkerAvailable, match=f"no worker consumes queue '{queue}'") as raised:
                call()
            took = time.monotonic() - started
            assert took < 5, f"{name} took {took:.1f}s"  # one heartbeat interval (1 s) plus a round trip
            assert isinstance(raised.value, ReplyTimeout)  # handlers written for the timeout still catch it
        assert queued_tasks(broker, nobody) == 0
        # Fire-and-forget needs no worker now: it is queued, durably, for whenever one starts.
        ltm.add(notes, ["queued for later"], wait=False)
        assert queued_tasks(broker, nobody) == 1


def test_a_worker_is_seen_by_its_queues_while_it_runs_and_gone_when_it_stops(
    settings: Settings, worker: Celery, raw_redis: redis.Redis
):
    keys = Keys(settings.redis.key_prefix)
    for queue in routing.QUEUES:
        assert [w.pid for w in consumers(raw_redis, keys, queue)] == [os.getpid()]
    (me,) = [w for w in live_workers(raw_redis, keys) if w.pid == os.getpid()]
    assert me.embedded_store == str(settings.qdrant.path.resolve())
    assert (me.store, me.store_location) == ("edge", me.embedded_store)
    assert me.store_bytes is not None
    assert me.store_bytes > 0  # measured by the worker: status shows it from any machine
    assert set(me.queues) == set(routing.QUEUES)


def test_a_caller_waiting_on_a_worker_that_died_stops_waiting(private_redis: PrivateRedis, tmp_path: Path):
    # The worker beats every 0.5 s (gone after 2 s); the caller gives a restart 1 s.
    url = private_redis.database_url()
    env = {
        "MEMORY_REDIS__URL": url,
        "MEMORY_QDRANT__PATH": str(tmp_path / "store"),
        "MEMORY_CELERY__HEARTBEAT_INTERVAL": "0.5",
    }
    settings = make_settings(url, tmp_path / "unused", redis={"url": url}, client={"timeout": 30, "worker_grace": 1})
    with MemoryClient(settings) as client:
        with celery_process("worker", env, tmp_path / "worker.log") as process:
            notes = client.long_term("acme", "u").get_or_create_memory_set("notes")
            assert notes.size() == 0
            process.send_signal(signal.SIGSTOP)  # hung, not gone: its heartbeat stops, its message waits
            try:
                started = time.monotonic()
                with pytest.raises(NoWorkerAvailable, match="stays queued"):
                    notes.size()
                took = time.monotonic() - started
            finally:
                process.send_signal(signal.SIGCONT)
                process.send_signal(signal.SIGKILL)
        assert took < 10, took  # heartbeat expiry (2 s) + grace (1 s), not the 30 s timeout


def test_status_lists_workers_it_did_not_start_and_up_never_starts_a_second_on_a_held_store(
    private_redis: PrivateRedis, tmp_path: Path
):
    url = private_redis.database_url()
    env = {
        "MEMORY_REDIS__URL": url,
        "MEMORY_QDRANT__PATH": str(tmp_path / "store"),
        "MEMORY_STACK__RUN_DIR": str(tmp_path / "run"),
        "MEMORY_METRICS__ENABLED": "false",
    }
    cli = [str(Path(sys.executable).parent / "memory-core")]
    run_env = {**os.environ, **env}
    with celery_process("worker", env, tmp_path / "worker.log") as process:
        wait_for(lambda: bool(live_workers(redis.Redis.from_url(url), Keys("mc"))), timeout=10)
        status = subprocess.run(
            [*cli, "status", "--json"], cwd=tmp_path, env=run_env, capture_output=True, text=True, check=False
        )
        (seen,) = json.loads(status.stdout)["workers"]
        assert seen["pid"] == process.pid
        assert seen["embedded_store"] == str((tmp_path / "store").resolve())
        text = subprocess.run(
            [*cli, "status"], cwd=tmp_path, env=run_env, capture_output=True, text=True, check=False
        ).stdout
        assert "workers  1 alive" in text
        assert "not running" not in text  # nothing it did not start is reported as down
        up = subprocess.run(
            [*cli, "up", "--no-beat", "--no-flower"], cwd=ROOT, env=run_env, capture_output=True, text=True, check=False
        )
        assert f"worker   not started: {seen['name']} (pid {process.pid}" in up.stdout, up.stdout + up.stderr
    subprocess.run([*cli, "down"], cwd=ROOT, env=run_env, capture_output=True, check=False)


def test_a_closed_client_says_so(settings: Settings, worker: Celery):
    client = MemoryClient(settings)
    notes = client.long_term("acme", "u").get_or_create_memory_set("notes")
    client.close()
    for call in (lambda: notes.add(["after close"]), lambda: notes.add(["after close"], wait=False), notes.size):
        with pytest.raises(RuntimeError, match="client is closed"):
            call()


def test_a_second_worker_in_the_process_stops_alone(
    client: MemoryClient, settings: Settings, raw_redis: redis.Redis, redis_url: str, tmp_path: Path, namespace: str
):
    # Celery's test helper stopped its worker with a process-wide flag: the session's worker stopped
    # with it, and every test after found no worker. Each in-thread worker now stops on its own.
    other = make_settings(redis_url, tmp_path / "store", redis={"url": redis_url, "key_prefix": "mcsecond"})
    app = create_app(other)
    try:
        with in_thread_worker(app), MemoryClient(other) as second:
            second.long_term("acme", "u").get_or_create_memory_set("notes").add(["x"])
    finally:
        services.close(app)
    keys = Keys(settings.redis.key_prefix)
    assert consumers(raw_redis, keys, routing.WRITE_QUEUE)  # the session's worker beats on
    assert client.long_term(namespace, "u").get_or_create_memory_set("notes").add(["y"])  # and answers


def test_a_heartbeat_with_fields_of_a_newer_worker_is_read_and_a_garbled_one_is_skipped(
    settings: Settings, worker: Celery, raw_redis: redis.Redis
):
    keys = Keys(settings.redis.key_prefix)
    newer = {"hostname": "next@vm", "queues": ["memory.write"], "name": "next@vm/1", "started_at": 0, "cpu": 3}
    for name, record in (("next@vm/1", json.dumps(newer)), ("bad@vm/1", "not json"), ("list@vm/1", "[1]")):
        raw_redis.set(keys.worker(name), record, ex=30)
        raw_redis.sadd(keys.workers(), name)
    seen = {w.name for w in live_workers(raw_redis, keys)}
    assert "next@vm/1" in seen
    assert not seen & {"bad@vm/1", "list@vm/1"}
    assert any(w.pid == os.getpid() for w in live_workers(raw_redis, keys))  # the session's worker still counts
