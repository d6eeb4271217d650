"""No queue entry can stop a worker: what it cannot decode or route goes, raw, to the unroutable dead letters.

Each entry is pushed straight onto the write queue in Redis, as a buggy producer, a truncated write or
anyone with broker access would leave it; then a probe write through the client must still be served by
the same worker process. Before the worker checked entries, the first five below made it exit (or, for
a message without an id, put it back and re-read it forever), and the poison came back to the next one.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from subprocess import Popen
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from memory_core import MemoryClient
from memory_core.client.deadletters import DeadLetters
from memory_core.core import routing
from memory_core.core.dispatch import celery_message
from memory_core.core.models import MemorySet
from memory_core.core.settings import Settings

from .processes import PrivateRedis, celery_process
from .rawbroker import add_kwargs
from .waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def poisoned(
    private_redis: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, Popen[bytes]]]:
    """A worker process of its own (a Redis database of its own) to feed poison to, and its settings."""
    url = private_redis.database_url()
    env = {"MEMORY_REDIS__URL": url, "MEMORY_QDRANT__PATH": str(tmp_path_factory.mktemp("poison-qdrant"))}
    with celery_process("worker", env, tmp_path_factory.mktemp("poison") / "worker.log") as worker:
        yield Settings(_env_file=None, redis={"url": url}, client={"timeout": 20}), worker


@pytest.fixture(scope="module")
def probe(poisoned: tuple[Settings, Popen[bytes]]) -> Iterator[MemorySet]:
    with MemoryClient(poisoned[0]) as client:
        yield client.long_term("poison", "probe").get_or_create_memory_set("notes", dedup="none")


def envelope(task_body: Any = None, **changes: Any) -> dict[str, Any]:
    """A queue entry of a memory.add task as kombu stores it (``task_body`` replacing the task's), with
    ``changes`` to its top-level fields."""
    task_id = str(uuid.uuid4())
    good_body, headers = celery_message(routing.ADD, task_id, add_kwargs("poison", "x", "poison"), "raw")
    raw = json.dumps(good_body if task_body is None else task_body).encode()
    entry: dict[str, Any] = {
        "body": base64.b64encode(raw).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": {
            "correlation_id": task_id,
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": routing.WRITE_QUEUE},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": str(uuid.uuid4()),
        },
    }
    entry.update(changes)
    return entry


def _without_id() -> dict[str, Any]:
    entry = envelope()
    del entry["headers"]["id"]
    return entry


def _task_named(name: Any) -> dict[str, Any]:
    entry = envelope()
    entry["headers"]["task"] = name
    return entry


_DEEP = 100_000  # far past the interpreter's recursion limit: json raises RecursionError, not ValueError
_NESTED = b"[" * _DEEP + b"]" * _DEEP


POISON: dict[str, bytes] = {
    "not JSON": b'{"body": "trunc',
    "not UTF-8": b"\xff\xfe\x00garbage",
    "a JSON number": b"42",
    "a body that is not base64": json.dumps(envelope(body="!!! not base64 !!!")).encode(),
    "a task body that is a JSON number": json.dumps(envelope(123)).encode(),
    "a task name that is a list": json.dumps(_task_named(["memory.add"])).encode(),
    "a task message without an id": json.dumps(_without_id()).encode(),
    "a deeply nested task body": json.dumps(envelope(body=base64.b64encode(_NESTED).decode())).encode(),
}


def _push(settings: Settings, raw: bytes) -> None:
    redis.Redis.from_url(settings.redis.url).lpush(settings.broker_key_prefix + routing.WRITE_QUEUE, raw)


def _serves(probe: MemorySet, worker: Popen[bytes]) -> None:
    item = uuid.uuid4().hex
    assert probe.add([f"probe {item}"], ids=[item]) == [item]
    assert worker.poll() is None, "the worker exited"


@pytest.mark.parametrize("case", list(POISON))
def test_an_entry_the_worker_cannot_use_is_dead_lettered_raw_and_the_worker_serves_on(
    poisoned: tuple[Settings, Popen[bytes]], probe: MemorySet, case: str
):
    settings, worker = poisoned
    r = redis.Redis.from_url(settings.redis.url)
    with MemoryClient(settings) as client:
        letters = DeadLetters(client.dispatcher_redis, client.keys, client.dispatcher)
        letters.drop(routing.OPS_NAMESPACE)
        _push(settings, POISON[case])
        _serves(probe, worker)
        (letter,) = letters.entries(routing.OPS_NAMESPACE)
    assert letter.error["type"] == "UnroutableMessage"
    assert letter.payload["raw"] == POISON[case].decode("utf-8", errors="replace")  # as read
    # Nothing is put back: the queue and the delivered-but-unacknowledged entries drain. The probe's own
    # entry is acknowledged only after its result is stored (late acks), so that may take a moment.
    wait_for(lambda: not r.llen(settings.broker_key_prefix + routing.WRITE_QUEUE), timeout=60)
    wait_for(lambda: not r.hlen(settings.broker_key_prefix + "unacked"), timeout=60)


def test_a_deeply_nested_entry_is_dead_lettered_and_the_worker_serves_on(
    poisoned: tuple[Settings, Popen[bytes]], probe: MemorySet
):
    settings, worker = poisoned
    with MemoryClient(settings) as client:
        letters = DeadLetters(client.dispatcher_redis, client.keys, client.dispatcher)
        letters.drop(routing.OPS_NAMESPACE)
        _push(settings, b'{"body": ' + _NESTED + b"}")
        _serves(probe, worker)
        (letter,) = letters.entries(routing.OPS_NAMESPACE)
    assert letter.error["type"] == "UnroutableMessage"
    assert "RecursionError" in letter.error["message"]
    # The decoder keeps no copy of what it could not decode, and the entry was already off its queue.
    assert letter.payload["raw"] == "(entry not kept: RecursionError)"


def test_unroutable_letters_are_listed_and_dropped_under_ops_but_never_replayed(
    poisoned: tuple[Settings, Popen[bytes]], probe: MemorySet
):
    settings, worker = poisoned
    with MemoryClient(settings) as client:
        letters = DeadLetters(client.dispatcher_redis, client.keys, client.dispatcher)
        letters.drop(routing.OPS_NAMESPACE)
        _push(settings, b"not json")
        _serves(probe, worker)
        assert routing.OPS_NAMESPACE in letters.namespaces()
        with pytest.raises(Exception, match="cannot be replayed"):
            letters.replay(routing.OPS_NAMESPACE)
        assert letters.drop(routing.OPS_NAMESPACE) == 1
        assert routing.OPS_NAMESPACE not in letters.namespaces()


def test_a_task_name_no_worker_knows_does_not_stop_the_worker(
    poisoned: tuple[Settings, Popen[bytes]], probe: MemorySet
):
    settings, worker = poisoned
    _push(settings, json.dumps(_task_named("memory.no_such_task")).encode())
    _serves(probe, worker)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
_FIELDS = ["body", "content-encoding", "content-type", "headers", "properties"]


@st.composite
def _mangled(draw: st.DrawFn) -> bytes:
    """A queue entry: random JSON, random bytes, or a good envelope with some fields replaced or dropped."""
    kind = draw(st.sampled_from(["json", "bytes", "envelope"]))
    if kind == "json":
        return json.dumps(draw(_JSON)).encode()
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    entry = envelope()
    for field in draw(st.lists(st.sampled_from(_FIELDS), min_size=1, max_size=3, unique=True)):
        if draw(st.booleans()):
            entry.pop(field)
        else:
            entry[field] = draw(_JSON)
    return json.dumps(entry).encode()


@hypothesis_settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=_mangled())
def test_no_random_entry_stops_the_worker(poisoned: tuple[Settings, Popen[bytes]], probe: MemorySet, raw: bytes):
    settings, worker = poisoned
    _push(settings, raw)
    _serves(probe, worker)
