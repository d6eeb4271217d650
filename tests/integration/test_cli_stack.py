"""memory-core up/status/down with real processes: Flower's API shows the tasks, the metrics endpoint scrapes,
and a backup taken by the worker, restored after a mistake, brings back exactly what was there."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from memory_core import MemoryClient, load_settings
from memory_core.core import routing
from memory_core.core.files import disk_usage

from .processes import PrivateRedis, free_port
from .waiting import wait_for

CLI = str(Path(sys.executable).parent / "memory-core")
AUTH = ("operator", "pa55-word")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def stack_env(private_redis: PrivateRedis, tmp_path: Path) -> Iterator[dict[str, str]]:
    url = private_redis.database_url()  # a Redis of its own: no other worker consumes these queues
    env = {
        "MEMORY_REDIS__URL": url,
        "MEMORY_REDIS__KEY_PREFIX": "mcstack",
        "MEMORY_QDRANT__PATH": str(tmp_path / "qdrant"),
        "MEMORY_STACK__RUN_DIR": str(tmp_path / "run"),
        "MEMORY_STACK__BACKUP_DIR": str(tmp_path / "backups"),
        "MEMORY_METRICS__PORT": str(free_port()),
        "MEMORY_FLOWER__PORT": str(free_port()),
        "MEMORY_CELERY__CONCURRENCY": "4",
        "MEMORY_CLIENT__TIMEOUT": "60",
        "MEMORY_FLOWER__BASIC_AUTH": "operator:pa55-word",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # load_settings() in this process sees what the stack sees
    try:
        yield env
    finally:
        cli(env, tmp_path, "down")
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    variables = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORY_", "FLOWER_"))}
    return subprocess.run(
        [CLI, *args], capture_output=True, text=True, env={**variables, **env}, cwd=cwd, timeout=180, check=False
    )


def ok_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_up_status_flower_metrics_and_a_backup_restore_round_trip(stack_env: dict[str, str], tmp_path: Path):
    env = stack_env
    up = cli(env, tmp_path, "up", "--no-beat")
    assert up.returncode == 0, up.stderr + up.stdout
    status = ok_json(cli(env, tmp_path, "status", "--json"))
    assert status["processes"]["worker"]["running"]
    assert status["processes"]["flower"]["running"]
    (store,) = status["stores"]  # as the worker reports it
    assert store["location"] == str(tmp_path / "qdrant")
    assert isinstance(store["bytes"], int)  # measured by the worker (a fresh store may hold next to nothing)
    assert status["queues"] == {q: 0 for q in routing.QUEUES}
    flower = f"http://127.0.0.1:{env['MEMORY_FLOWER__PORT']}"
    wait_for(lambda: _answers(f"{flower}/healthcheck"), 60)

    def tasks() -> dict[str, Any]:
        return dict(httpx.get(f"{flower}/api/tasks", auth=AUTH, timeout=5).json())

    with MemoryClient(load_settings()) as client:
        # Flower switches task events on in the workers every 5 s (they are off by default): until it lists a
        # task, the workers' tasks go unseen. A new set a try, in a namespace of its own, until one is listed.
        probe, probes = client.long_term("flower-probe", "p"), itertools.count()

        def flower_lists_a_new_task() -> bool:
            probe.get_or_create_memory_set(f"probe-{next(probes)}")
            return any(t["name"] == "memory.create_set" for t in tasks().values())

        wait_for(flower_lists_a_new_task, 60, interval=0.5)

        ltm = client.long_term("acme", "alice")
        notes = ltm.get_or_create_memory_set("notes", capacity=1000)
        notes.add([f"secret fact {i}" for i in range(120)], ids=[f"n{i}" for i in range(120)])
        assert notes.search("fact 7", limit=3)

        # Flower's HTTP API lists the tasks with their states; arguments name the scope, never memory text.
        wait_for(lambda: any(t["name"] == "memory.search" for t in tasks().values()), 30)
        seen = tasks()
        states = {(t["name"], t["state"]) for t in seen.values()}
        assert ("memory.add", "SUCCESS") in states
        created = [
            json.loads(t["kwargs"])
            for t in seen.values()
            if (t["name"], t["state"]) == ("memory.create_set", "SUCCESS")
        ]
        assert {"namespace": "acme", "key": "alice", "set": "notes"} in created  # not only the probes'
        add = next(t for t in seen.values() if t["name"] == "memory.add")
        assert json.loads(add["kwargs"]) == {"namespace": "acme", "key": "alice", "set": "notes", "items": 120}
        assert "secret" not in json.dumps(seen)

        # The worker's metrics endpoint: tasks, latency, embedding, batches, caches, items per namespace.
        scraped = _scrape(f"http://127.0.0.1:{env['MEMORY_METRICS__PORT']}/metrics")
        assert scraped[("memory_core_tasks_total", (("state", "success"), ("task", "memory.add")))] == 1
        assert scraped[("memory_core_task_seconds_count", (("task", "memory.search"),))] == 1
        assert scraped[("memory_core_embedded_texts_total", ())] >= 120
        assert scraped[("memory_core_batch_items_sum", ())] == 120
        assert scraped[("memory_core_store_seconds_count", (("operation", "upsert"),))] >= 1
        assert ("memory_core_cache_requests_total", (("result", "miss"), ("tier", "embedding"))) in scraped
        assert scraped[("memory_core_items", (("namespace", "acme"),))] == 120

        before = _items(env, tmp_path)
        backup = ok_json(cli(env, tmp_path, "backup", "--label", "before-mistake", "--json"))
        assert backup["location"] == str(tmp_path / "backups" / "before-mistake")
        # The engine preallocates its files sparsely; the snapshot keeps the holes (a plain copy took ~500 MB).
        store_on_disk = disk_usage(tmp_path / "qdrant")
        assert 0 < backup["bytes_on_disk"] <= 2 * store_on_disk + 1_000_000, (backup, store_on_disk)
        notes.delete([f"n{i}" for i in range(60)])  # the mistake
        notes.add(["a stray item"], ids=["stray"])
        assert notes.size() == 61

    refused = cli(env, tmp_path, "restore", "before-mistake", "--yes")
    assert refused.returncode == 2
    assert "stop it first" in refused.stderr
    cli(env, tmp_path, "down")
    assert not ok_json(cli(env, tmp_path, "status", "--json"))["processes"]["worker"]["running"]
    restored = cli(env, tmp_path, "restore", "before-mistake", "--yes")
    assert restored.returncode == 0, restored.stderr
    assert disk_usage(tmp_path / "qdrant") <= 2 * backup["bytes_on_disk"] + 1_000_000
    again = cli(env, tmp_path, "up", "--no-beat", "--no-flower")
    assert again.returncode == 0
    assert "worker   pid" in again.stdout, again.stdout  # the stopped worker is not taken for a live one
    assert _items(env, tmp_path) == before  # every item, vector and field as it was; the stray one gone


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, auth=AUTH, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(url, timeout=5).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _items(env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    out = cwd / "export.jsonl"
    done = cli(env, cwd, "export", "acme", "--vectors", "-o", str(out))
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    for row in rows:
        if row["kind"] == "item":
            row["item"].pop("last_accessed_time")
    return rows
