"""The vector store is unavailable for a while: writes retry with backoff and land; past the budget they are
dead-lettered with their payload, and replaying (even twice) lands them exactly once."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis

from memory_core import MemoryClient, TransientStoreError
from memory_core.client.deadletters import DeadLetters
from memory_core.core.settings import Settings
from tests.integration.processes import celery_process
from tests.integration.waiting import wait_for


@pytest.mark.timeout(300)
def test_writes_outlast_a_store_outage_and_dead_letters_replay_once(fault_redis_url: str, tmp_path: Path):
    flag = tmp_path / "store-down"
    env = {
        "MEMORY_REDIS__URL": fault_redis_url,
        "MEMORY_QDRANT__PATH": str(tmp_path / "qdrant"),
        "MEMORY_QDRANT__FAULT_FLAG": str(flag),
        "MEMORY_CELERY__MAX_RETRIES": "4",
        "MEMORY_CELERY__RETRY_BACKOFF_MAX": "2",
    }
    settings = Settings(_env_file=None, redis={"url": fault_redis_url}, client={"timeout": 60})
    broker = redis.Redis.from_url(fault_redis_url)
    with celery_process("worker", env, tmp_path / "worker.log"), MemoryClient(settings) as client:
        ltm = client.long_term("faults", "outage")
        notes = ltm.get_or_create_memory_set("notes", dedup="none")

        # A short outage: the write retries with backoff and lands once the store is back.
        flag.touch()
        receipt = ltm.submit(notes, ["written during the outage"], ids=["during"])
        # Short next to the retry budget: jittered backoff could spend all retries within a 2 s outage.
        time.sleep(0.5)
        flag.unlink()
        assert receipt.wait(timeout=60) == ["during"]
        assert [i.id for i in notes.get()] == ["during"]
        log = (tmp_path / "worker.log").read_text(errors="replace")
        assert f"memory.add[{receipt.task_id}] retry" in log  # it did fail during the outage, then landed

        # A long outage: past the retry budget the write is dead-lettered, payload and all.
        flag.touch()
        receipt = ltm.submit(notes, ["outlived the retries"], ids=["later"])
        with pytest.raises(TransientStoreError, match="store unavailable"):
            receipt.wait(timeout=60)
        letters = DeadLetters(broker, client.keys, client.dispatcher)
        (letter,) = letters.entries("faults")
        assert letter.retries == 4
        assert letter.payload["request"]["items"][0]["value"] == "outlived the retries"
        saved = json.dumps(letter.model_dump(by_alias=True, exclude={"namespace"}))
        flag.unlink()

        letters.replay("faults")
        wait_for(lambda: notes.size() == 2, 30)
        broker.rpush(client.keys.dead_letters("faults"), saved)  # the same letter, replayed again
        letters.replay("faults")
        notes.add(["barrier"], ids=["barrier"])  # queued behind the second replay on the write queue
        assert sorted(i.id for i in notes.get()) == ["barrier", "during", "later"]
