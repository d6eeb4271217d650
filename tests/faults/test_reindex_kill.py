"""SIGKILL the worker again and again while it re-embeds its store, with adds and deletes going on: after the
restarts the reindex completes, and the new collection equals the old in ids, values, metadata, seq and
tombstones (nothing lost, nothing resurrected). Runs on each broker."""

from __future__ import annotations

import random
import re
import signal
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from memory_core import MemoryClient, MemoryCoreError
from memory_core.client.admin import Admin
from memory_core.core.settings import Settings
from tests.faults.conftest import FaultBroker
from tests.integration.processes import celery_process
from tests.integration.waiting import wait_for
from tests.reindexing import both_collections, follow

ITEMS = 1500
KILLS = 4


@pytest.mark.timeout(600)
def test_sigkills_during_a_reindex_with_writes_lose_and_resurrect_nothing(
    fault_broker: FaultBroker, fault_redis_url: str, tmp_path: Path
):
    began = time.monotonic()
    path = tmp_path / "qdrant"
    env = {
        "MEMORY_REDIS__URL": fault_redis_url,
        "MEMORY_QDRANT__PATH": str(path),
        "MEMORY_EMBEDDER__MODEL": "hashing",
        "MEMORY_CELERY__VISIBILITY_TIMEOUT": "8",  # a killed worker's tasks come back after 8 s (Redis)
        "MEMORY_CELERY__RETRY_BACKOFF_MAX": "4",
        "MEMORY_CELERY__CONCURRENCY": "4",
        "MEMORY_REINDEX__BATCH_SIZE": "32",  # many batches, so kills land between and inside them
        "MEMORY_REINDEX__LOCK_TTL": "5",  # a killed worker's parts are taken over within 5 s
        "MEMORY_REINDEX__REFRESH": "0.5",
        "MEMORY_REINDEX__DUTY": "1",  # the copy keeps up with the writers here; its share is measured in ops/bench
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
        client={"timeout": 120},
    )
    writing = threading.Event()
    written: list[str] = []
    failed: list[BaseException] = []
    kills = 0

    with ExitStack() as stack:
        worker = stack.enter_context(celery_process("worker", env, tmp_path / "worker-0.log"))
        client = stack.enter_context(MemoryClient(settings))
        notes = client.long_term("faults", "reindex").get_or_create_memory_set(
            "notes", capacity=1_000_000, dedup="none"
        )
        for start in range(0, ITEMS, 250):
            notes.add(
                [f"fact {i} of the preloaded store" for i in range(start, start + 250)],
                ids=[f"p{i}" for i in range(start, start + 250)],
                metadatas=[{"i": i} for i in range(start, start + 250)],
            )
        notes.delete([f"p{i}" for i in range(0, ITEMS, 9)])

        def write() -> None:
            rng = random.Random(7)
            n = 0
            while writing.is_set():
                n += 1
                try:
                    notes.add([f"written during the reindex {n}", f"another {n}"], ids=[f"w{n}", f"x{n}"])
                    notes.add([f"rewritten {n}"], ids=[f"p{rng.randrange(ITEMS)}"])
                    notes.delete([f"p{rng.randrange(ITEMS)}", f"x{n}"])
                    written.append(f"w{n}")
                except MemoryCoreError as exc:  # a kill interrupted it: it may or may not have landed
                    failed.append(exc)

        admin = Admin(client)
        assert admin.reindex("start", to="all-MiniLM-L6-v2").state == "building"
        writing.set()
        writer = threading.Thread(target=write)
        writer.start()
        rng = random.Random(3)
        while kills < KILLS:
            time.sleep(rng.uniform(1.0, 3.0))
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            kills += 1
            worker = stack.enter_context(celery_process("worker", env, tmp_path / f"worker-{kills}.log"))
        killed_at = admin.reindex("status")
        done = follow(admin, timeout=300)
        wait_for(lambda: len(written) >= 20, 120, interval=0.2)  # writes mirrored after completion count too
        writing.clear()
        writer.join()
        # The copies owed for writes made after completion are caught up in the background ("status" kicks
        # that chain when it has stopped) or at the switch; here, before the collections are compared.
        wait_for(lambda: admin.reindex("status").owed == 0, 300, interval=0.5)
        wait_for(lambda: fault_broker.drained(settings), 120, interval=0.5)
        assert done.state == "complete", done
        target = done.collection
        worker.send_signal(signal.SIGTERM)
        worker.wait()

    old, new = both_collections(path, "hashing-384", target)
    print(
        f"\n[{fault_broker.name}] kills={kills} points={len(old)} written={len(written)} failed_calls={len(failed)} "
        f"scanned_when_killing_ended={killed_at.scanned}/{2 * killed_at.total} batches_redone={_redone(tmp_path)} "
        f"seconds={time.monotonic() - began:.0f}"
    )
    assert kills == KILLS
    assert killed_at.state == "building", "the reindex ended before the kills did; the test proved nothing"
    assert len(written) >= 20
    missing, extra = set(old) - set(new), set(new) - set(old)
    assert not missing, f"{len(missing)} points missing from the new collection, e.g. {sorted(missing)[:5]}"
    assert not extra, f"{len(extra)} points only in the new collection, e.g. {sorted(extra)[:5]}"
    differing = [pid for pid in old if old[pid] != new[pid]]
    assert not differing, f"{len(differing)} points differ, e.g. {old[differing[0]]} != {new[differing[0]]}"


def _redone(logs: Path) -> int:
    """Reindex batches received by more than one worker incarnation: batches a kill interrupted."""
    seen: dict[str, int] = {}
    for log in logs.glob("worker-*.log"):
        text = log.read_text(errors="replace")
        for task_id in set(re.findall(r"Task memory\.reindex_batch\[([0-9a-f-]+)\] received", text)):
            seen[task_id] = seen.get(task_id, 0) + 1
    return sum(1 for count in seen.values() if count > 1)
