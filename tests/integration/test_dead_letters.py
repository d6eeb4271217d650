"""Dead letters keep the payload of a write that failed for good; replaying lands it, and replaying twice changes
nothing. A caller's mistake is told to the caller and never dead-lettered, on every task."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from memory_core import (
    InvalidRequestError,
    MemoryClient,
    MemorySet,
    MemorySetNotFound,
    SetDefinitionConflict,
    TransientStoreError,
)
from memory_core.client.admin import Admin
from memory_core.client.deadletters import DeadLetters
from memory_core.core import routing
from memory_core.core.errors import MemoryCoreError
from memory_core.workers import services
from memory_core.workers.app import create_app
from tests.integration.conftest import make_settings
from tests.integration.in_thread import in_thread_worker

from .rawbroker import publish_raw
from .waiting import wait_for


@pytest.fixture
def failing_store(redis_url: str, tmp_path: Path) -> Iterator[tuple[MemoryClient, Path]]:
    """A worker (queues of its own) whose store fails with ``TransientStoreError`` while the flag file exists."""
    flag = tmp_path / "store-down"
    settings = make_settings(
        redis_url,
        tmp_path / "qdrant",
        redis={"url": redis_url, "key_prefix": "mcfault"},
        embedder={"model": "hashing"},
        qdrant={"backend": "edge", "path": tmp_path / "qdrant", "fault_flag": flag},
        celery={"concurrency": 2, "max_retries": 1, "retry_backoff_max": 1},
    )
    app = create_app(settings)
    with in_thread_worker(app, concurrency=2), MemoryClient(settings) as client:
        yield client, flag
    services.close(app)


def test_a_failed_write_is_replayed_once_its_cause_is_fixed(failing_store: tuple[MemoryClient, Path], raw_redis):
    client, flag = failing_store
    notes = client.long_term("acme", "u").get_or_create_memory_set("notes", dedup="none")
    flag.touch()  # the store is down for longer than the retries last
    with pytest.raises(TransientStoreError):
        notes.add(["kept in the dead letter"], ids=["x"])
    letters = DeadLetters(raw_redis, client.keys, client.dispatcher)
    assert "acme" in letters.namespaces()
    (letter,) = letters.entries("acme")
    assert letter.task == "memory.add"
    assert letter.error["type"] == "TransientStoreError"
    assert letter.payload["request"]["items"][0]["value"] == "kept in the dead letter"

    flag.unlink()  # the cause is fixed
    raw = [letter.model_dump(by_alias=True) for letter in letters.entries("acme")]
    assert len(letters.replay("acme")) == 1
    wait_for(lambda: notes.size() == 1)
    assert letters.entries("acme") == []
    assert "acme" not in letters.namespaces()

    # Replaying the same letter again (say, from a saved copy) writes the same point: still one item.
    raw_redis.rpush(client.keys.dead_letters("acme"), *[_json(r) for r in raw])
    assert len(letters.replay("acme")) == 1
    wait_for(lambda: raw_redis.llen(client.keys.dead_letters("acme")) == 0)
    notes.add(["barrier"], ids=["y"])  # the same write queue: the replay ahead of it has been handled
    assert [i.id for i in notes.get()] == ["x", "y"]


def test_drop_removes_a_namespaces_letters(client: MemoryClient, namespace: str, raw_redis):
    # A message of a schema version the worker does not know is kept (it lands once the workers are upgraded).
    request = {"v": 99, "namespace": namespace, "key": "u", "set_name": "notes", "items": []}
    with pytest.raises(InvalidRequestError):
        client.dispatcher.wait(namespace, publish_raw(client.settings, routing.ADD, {"request": request}))
    letters = DeadLetters(raw_redis, client.keys, client.dispatcher)
    wait_for(lambda: len(letters.entries(namespace)) == 1)
    assert letters.drop(namespace) == 1
    assert letters.entries(namespace) == []


def _json(letter: dict[str, object]) -> str:
    fields = {k: v for k, v in letter.items() if k != "namespace"}
    return json.dumps(fields)


def test_a_callers_mistake_is_told_to_the_caller_and_kept_nowhere(client: MemoryClient, namespace: str, raw_redis):
    ltm = client.long_term(namespace, "u")
    ltm.get_or_create_memory_set("notes", capacity=10)
    with pytest.raises(SetDefinitionConflict, match="capacity"):
        ltm.get_or_create_memory_set("notes", capacity=20)
    admin = Admin(client)
    label = f"twice-{namespace}"
    admin.backup(label)
    with pytest.raises(InvalidRequestError, match="exists already"):
        admin.backup(label)
    letters = DeadLetters(raw_redis, client.keys, client.dispatcher)
    assert letters.namespaces() == []
    assert raw_redis.llen(client.keys.unroutable_dead_letters()) == 0


def _no_letters(client: MemoryClient, raw_redis: redis.Redis) -> None:
    assert DeadLetters(raw_redis, client.keys, client.dispatcher).namespaces() == []
    assert raw_redis.llen(client.keys.unroutable_dead_letters()) == 0


# What a caller can get wrong, through the public API: (task, the call, the error it gets).
CALLER_MISTAKES: dict[str, tuple[str, Callable[[MemoryClient, str], object], type[MemoryCoreError]]] = {
    "add into a missing set": (
        routing.ADD,
        lambda c, ns: c.long_term(ns, "u").add(MemorySet(name="missing"), ["x"], ids=["x"]),
        MemorySetNotFound,
    ),
    "delete from a missing set": (
        routing.DELETE,
        lambda c, ns: c.long_term(ns, "u").delete(MemorySet(name="missing"), ["x"]),
        MemorySetNotFound,
    ),
    "a conflicting set definition": (
        routing.CREATE_SET,
        lambda c, ns: [c.long_term(ns, "u").get_or_create_memory_set("notes", capacity=n) for n in (10, 20)],
        SetDefinitionConflict,
    ),
}


@pytest.mark.parametrize("case", sorted(CALLER_MISTAKES))
def test_a_callers_mistake_through_the_api_is_told_typed_and_never_dead_lettered(
    client: MemoryClient, namespace: str, raw_redis, case: str
):
    task, call, error = CALLER_MISTAKES[case]
    assert routing.ROUTES[task] in routing.DEAD_LETTER_QUEUES  # a task whose real failures are dead-lettered
    with pytest.raises(error):
        call(client, namespace)
    client.long_term(namespace, "u").get_or_create_memory_set("barrier").add(["x"])  # behind it on the write queue
    _no_letters(client, raw_redis)


# Every task on a queue whose failures are dead-lettered and that takes a request.
REQUEST_TASKS = sorted(
    task
    for task, queue in routing.ROUTES.items()
    if queue in routing.DEAD_LETTER_QUEUES
    and task
    not in {
        routing.COMPACTION_SWEEP,
        routing.TTL_SWEEP,
        routing.FLUSH_ACCESS,
        routing.EVICT,
        routing.OPTIMIZE,
        routing.FORMATION_RESUME_DUE,
    }
)


def test_the_request_tasks_are_every_dead_lettered_task_that_takes_a_request(worker):
    import inspect

    takes = {name for name in routing.ROUTES if "request" in inspect.signature(worker.tasks[name].run).parameters}
    assert set(REQUEST_TASKS) == {t for t in takes if routing.ROUTES[t] in routing.DEAD_LETTER_QUEUES}


@pytest.mark.parametrize("task", REQUEST_TASKS)
def test_a_request_that_fails_validation_is_told_typed_and_never_dead_lettered(
    client: MemoryClient, namespace: str, raw_redis, task: str
):
    request: dict[str, Any] = {"v": 1, "namespace": namespace, "key": "u", "not_a_field": True}
    replies = routing.OPS_NAMESPACE if task in routing.OPS_REPLIES else namespace
    with pytest.raises(InvalidRequestError, match="not_a_field"):
        client.dispatcher.wait(replies, publish_raw(client.settings, task, {"request": request}))
    _no_letters(client, raw_redis)
