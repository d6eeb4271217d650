"""A worker that cannot work says why and exits before it takes a message; one that fails later still replies."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import redis
from celery import Celery

from memory_core import ConfigurationError, MemoryClient
from memory_core.client.deadletters import DeadLetters
from memory_core.core.settings import Settings
from memory_core.testing.fake_openai import VALID_KEY, FakeOpenAI
from memory_core.workers import services
from memory_core.workers.app import create_app

from .conftest import make_settings
from .in_thread import in_thread_worker
from .processes import CELERY, ROOT, PrivateRedis, celery_process

pytestmark = pytest.mark.slow


@pytest.fixture
def own_url(private_redis: PrivateRedis) -> str:
    """A Redis database of the test's own: no worker of the session consumes its queues."""
    return private_redis.database_url()


def _start(url: str, env: dict[str, str], timeout: float = 60) -> tuple[int, str, float]:
    """Runs ``celery worker`` on ``url`` until it exits; its exit code, its stderr's last line, and how long it
    ran."""
    started = time.monotonic()
    done = subprocess.run(
        [CELERY, "-A", "memory_core.workers.app", "worker", "-l", "WARNING"],
        check=False,
        cwd=ROOT,
        env={**os.environ, "MEMORY_REDIS__URL": url, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return done.returncode, lines[-1] if lines else "", time.monotonic() - started


def test_a_worker_whose_store_cannot_be_opened_exits_at_once_naming_the_path(own_url: str, tmp_path: Path):
    (tmp_path / "plain-file").write_text("")
    path = tmp_path / "plain-file" / "store"
    code, last, took = _start(own_url, {"MEMORY_QDRANT__PATH": str(path)})
    assert code != 0
    assert last.startswith("memory-core worker cannot start: cannot open the embedded store at")
    assert str(path) in last
    assert "MEMORY_QDRANT__PATH" in last
    assert took < 30  # start-up time, not a task timeout; measured: under 1 s


def test_a_second_worker_on_a_held_embedded_store_exits_naming_the_holder(own_url: str, tmp_path: Path):
    env = {"MEMORY_QDRANT__PATH": str(tmp_path / "store"), "MEMORY_REDIS__URL": own_url}
    with celery_process("worker", env, tmp_path / "first.log") as first:
        code, last, _ = _start(own_url, env)
    assert code != 0
    assert f"in use by pid {first.pid}" in last
    assert str((tmp_path / "store").resolve()) in last


def test_a_worker_without_its_model_runtime_exits_naming_the_package(own_url: str, tmp_path: Path):
    # A plain install without the worker's packages: onnxruntime cannot be imported.
    (tmp_path / "onnxruntime").mkdir()
    (tmp_path / "onnxruntime" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'onnxruntime'\", name='onnxruntime')\n"
    )
    env = {
        "MEMORY_QDRANT__PATH": str(tmp_path / "store"),
        "MEMORY_EMBEDDER__MODEL": "all-MiniLM-L6-v2",
        "PYTHONPATH": str(tmp_path),
    }
    code, last, _ = _start(own_url, env)
    assert code != 0
    assert last == "memory-core worker cannot start: missing package 'onnxruntime': pip install 'memory-core[worker]'"


@pytest.mark.parametrize(
    ("mode", "dimensions", "named"),
    [
        ("ignore_dimensions", "256", ["ignores MEMORY_EMBEDDER__DIMENSIONS=256", "[384] dimensions", "set it to 384"]),
        ("huge_dimension", "", ["65,537 dimensions", "MEMORY_EMBEDDER__DIMENSIONS", "MEMORY_EMBEDDER__MODEL"]),
        ("zero_dimension", "", ["0 dimensions", "MEMORY_EMBEDDER__DIMENSIONS"]),
        ("non_finite", "384", ["non-finite value (NaN or infinity)"]),
    ],
)
def test_a_worker_whose_endpoint_answers_vectors_no_store_can_take_exits_naming_the_setting(
    own_url: str, tmp_path: Path, mode: str, dimensions: str, named: list[str]
):
    store = tmp_path / "store"
    env = {
        "MEMORY_QDRANT__PATH": str(store),
        "MEMORY_EMBEDDER__MODEL": "openai:text-embedding-3-small",
        "MEMORY_EMBEDDER__API_KEY": VALID_KEY,
        **({"MEMORY_EMBEDDER__DIMENSIONS": dimensions} if dimensions else {}),
    }
    with FakeOpenAI(dimension=384) as endpoint:
        endpoint.behave(mode)
        code, last, _ = _start(own_url, {**env, "MEMORY_EMBEDDER__BASE_URL": endpoint.url})
        assert len(endpoint.requests) == 1  # one probe, before anything else
    assert code != 0
    assert last.startswith("memory-core worker cannot start: the embeddings endpoint at localhost")
    for part in named:
        assert part in last
    assert not store.exists() or not any(store.iterdir())  # checked before the store: nothing pinned at a length


@pytest.fixture
def own_worker(own_url: str, tmp_path: Path) -> tuple[Settings, Celery]:
    settings = make_settings(own_url, tmp_path / "store", client={"timeout": 20})
    return settings, create_app(settings)


def test_a_task_that_cannot_reach_the_store_still_replies_and_keeps_the_write(own_worker: tuple[Settings, Celery]):
    settings, app = own_worker
    with (
        in_thread_worker(app, concurrency=2),
        MemoryClient(settings) as client,
    ):
        notes = client.long_term("acme", "u").get_or_create_memory_set("notes")
        notes.add(["stored while the store was there"])
        # The store goes away under the running worker (its services are rebuilt on the next task,
        # and the directory is now a plain file): the failure path needs no store.
        services.get(app).close()
        services._built.pop(app)  # the test stands in for a store lost at run time
        path = settings.qdrant.path
        for child in sorted(path.rglob("*"), reverse=True):
            child.unlink() if child.is_file() else child.rmdir()
        path.rmdir()
        path.write_text("not a directory")
        started = time.monotonic()
        with pytest.raises(ConfigurationError, match="cannot open the embedded store"):
            notes.add(["kept in a dead letter"], ids=["late"])
        assert time.monotonic() - started < 10  # the typed reply, not the 20 s client timeout
        letters = DeadLetters(redis.Redis.from_url(settings.redis.url), client.keys, client.dispatcher)
        (letter,) = letters.entries("acme")
        assert letter.payload["request"]["items"][0]["value"] == "kept in a dead letter"
    services.close(app)
