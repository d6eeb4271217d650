"""A write delivered again after its caller was answered never undoes the writes that came after it.

Both ways a Redis broker hands a task out twice, pinned in time (``tests/faults/held_acks.py`` holds
each add's acknowledgement back after its reply): a worker SIGKILLed between the reply and the ack, and
a task that outlives the visibility timeout. Each round writes ``x`` (old) and ``y``, gets the reply,
then writes ``x`` (new) and deletes ``y``; the stale add runs again only after that. Before writes were
monotonic, ``x`` read the old value and ``y`` came back.
"""

from __future__ import annotations

import re
import signal
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis

from memory_core import MemoryClient
from memory_core.core.settings import Settings
from tests.integration.processes import celery_process
from tests.integration.waiting import broker_drained, wait_for

ROUNDS = 3
HELD = "tests.faults.held_acks"


def _env(redis_url: str, tmp_path: Path, visibility_timeout: int, hold_seconds: float) -> dict[str, str]:
    return {
        "MEMORY_REDIS__URL": redis_url,
        "MEMORY_QDRANT__PATH": str(tmp_path / "qdrant"),
        "MEMORY_CELERY__VISIBILITY_TIMEOUT": str(visibility_timeout),
        "MEMORY_CELERY__RETRY_BACKOFF_MAX": "1",
        "MEMORY_CELERY__CONCURRENCY": "8",
        "MEMORY_TEST_HOLD_FLAG": str(tmp_path / "hold"),
        "MEMORY_TEST_HOLD_SECONDS": str(hold_seconds),
    }


def _settings(redis_url: str, visibility_timeout: int) -> Settings:
    return Settings(
        _env_file=None,
        redis={"url": redis_url},
        celery={"visibility_timeout": visibility_timeout, "retry_backoff_max": 1},
        client={"timeout": 60},
    )


def _log_events(log: Path) -> list[tuple[str, str, str]]:
    """(task name, task id, received | succeeded) in the order the worker logged them."""
    pattern = r"Task (memory\.\w+)\[([0-9a-f-]+)\] (received|succeeded)"
    return re.findall(pattern, log.read_text(errors="replace"))


def _ran_after_the_later_writes(log: Path, stale: list[str]) -> bool:
    """Whether every stale add was received (again) after the worker finished the last delete."""
    events = _log_events(log)
    last_delete = max(i for i, (name, _, what) in enumerate(events) if name == "memory.delete" and what == "succeeded")
    again = {task_id for i, (_, task_id, what) in enumerate(events) if what == "received" and i > last_delete}
    return set(stale) <= again


@pytest.mark.timeout(300)
def test_an_add_redelivered_after_a_sigkill_never_undoes_the_writes_after_it(fault_redis_url: str, tmp_path: Path):
    # Long enough for the second worker to start and take the later writes before the stale adds come back.
    visibility = 25
    env = _env(fault_redis_url, tmp_path, visibility, hold_seconds=120)
    settings = _settings(fault_redis_url, visibility)
    (tmp_path / "hold").touch()
    with ExitStack() as stack:
        held = stack.enter_context(celery_process("worker", env, tmp_path / "held.log", app=HELD))
        client = stack.enter_context(MemoryClient(settings))
        ltm = client.long_term("faults", "redelivery")
        notes = ltm.get_or_create_memory_set("notes", capacity=1_000_000, dedup="none")
        stale = []
        for n in range(ROUNDS):
            receipt = ltm.submit(notes, [f"x{n} old", f"y{n} written"], ids=[f"x{n}", f"y{n}"])
            assert receipt.wait(30) == [f"x{n}", f"y{n}"]  # acknowledged to the caller; the ack is held back
            stale.append(receipt.task_id)
        held.send_signal(signal.SIGKILL)  # right after the replies, before any ack
        held.wait()
        (tmp_path / "hold").unlink()

        stack.enter_context(celery_process("worker", env, tmp_path / "after.log"))
        for n in range(ROUNDS):
            notes.add([f"x{n} new"], ids=[f"x{n}"])
            assert notes.delete([f"y{n}"]) == 1
        broker = redis.Redis.from_url(fault_redis_url)
        wait_for(lambda: broker_drained(broker, settings), 120)

        assert _ran_after_the_later_writes(tmp_path / "after.log", stale), "no stale add came back: proved nothing"
        items = notes.get()
    assert {i.id: i.value for i in items} == {f"x{n}": f"x{n} new" for n in range(ROUNDS)}


@pytest.mark.timeout(300)
def test_an_add_that_outlives_the_visibility_timeout_never_undoes_the_writes_after_it(
    fault_redis_url: str, tmp_path: Path
):
    visibility = 4
    env = _env(fault_redis_url, tmp_path, visibility, hold_seconds=visibility + 6)
    settings = _settings(fault_redis_url, visibility)
    with ExitStack() as stack:
        stack.enter_context(celery_process("worker", env, tmp_path / "worker.log", app=HELD))
        client = stack.enter_context(MemoryClient(settings))
        ltm = client.long_term("faults", "slow")
        notes = ltm.get_or_create_memory_set("notes", capacity=1_000_000, dedup="none")
        stale = []
        for n in range(ROUNDS):
            (tmp_path / "hold").touch()  # this add is slow: its message stays unacknowledged past the timeout
            receipt = ltm.submit(notes, [f"x{n} old", f"y{n} written"], ids=[f"x{n}", f"y{n}"])
            assert receipt.wait(30) == [f"x{n}", f"y{n}"]
            (tmp_path / "hold").unlink()
            stale.append(receipt.task_id)
            notes.add([f"x{n} new"], ids=[f"x{n}"])
            assert notes.delete([f"y{n}"]) == 1
        broker = redis.Redis.from_url(fault_redis_url)
        wait_for(lambda: broker_drained(broker, settings), 120)

        received = [task_id for name, task_id, what in _log_events(tmp_path / "worker.log") if what == "received"]
        assert all(received.count(task_id) >= 2 for task_id in stale), "no add was delivered twice: proved nothing"
        items = notes.get()
    assert {i.id: i.value for i in items} == {f"x{n}": f"x{n} new" for n in range(ROUNDS)}
