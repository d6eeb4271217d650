"""Redis (broker and cache) goes away: L1 hits still answer, the rest fails fast and typed, and it all recovers."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from memory_core import BrokerUnavailable, MemoryClient, NoWorkerAvailable
from memory_core.core.settings import Settings

from .processes import celery_process, free_port, start_redis, stop


@pytest.mark.slow
def test_l1_answers_during_an_outage_and_the_client_recovers(tmp_path: Path):
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    env = {"MEMORY_REDIS__URL": url, "MEMORY_QDRANT__PATH": str(tmp_path / "qdrant"), "MEMORY_CELERY__CONCURRENCY": "2"}
    redis_server = start_redis(port, tmp_path / "redis.log")
    settings = Settings(_env_file=None, redis={"url": url, "socket_timeout": 1}, client={"timeout": 30})
    try:
        with celery_process("worker", env, tmp_path / "worker.log"), MemoryClient(settings) as client:
            notes = client.long_term("outage", "u").get_or_create_memory_set("notes")
            ids = notes.add(["green tea every morning", "flight to Tokyo on Friday"])
            cached_search = notes.search("tea", limit=2)
            cached_items = notes.get(ids)

            stop(redis_server)
            assert notes.search("tea", limit=2) == cached_search  # L1
            assert notes.get(ids) == cached_items  # L1
            for call in (lambda: notes.search("Tokyo", limit=2), lambda: notes.add(["new"]), notes.size):
                started = time.monotonic()
                with pytest.raises(BrokerUnavailable, match=f"127.0.0.1:{port}"):
                    call()
                assert time.monotonic() - started < 5

            redis_server = start_redis(port, tmp_path / "redis.log")
            deadline = time.monotonic() + 60
            while True:  # the worker reconnects on its own; so does the client
                try:
                    hits = notes.search("Tokyo", limit=1)
                    break
                # Until the worker consumes again (its heartbeat went with the Redis that restarted empty),
                # a caller is told that no worker listens.
                except (BrokerUnavailable, NoWorkerAvailable):
                    assert time.monotonic() < deadline, "the client did not recover"
                    time.sleep(0.5)
            assert hits[0].id == ids[1]  # the store kept everything acknowledged
            assert notes.size() == 2
    finally:
        stop(redis_server)
