"""Property-based bad input: over the public API (nothing enqueued on error) and raw broker messages (the
worker survives, dead-letters them, and no other tenant is touched)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core import InvalidRequestError, MemoryClient, MemorySet, routing

from .conftest import make_settings
from .rawbroker import publish_raw
from .waiting import queued_tasks, wait_for

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40)
)
json_like = st.recursive(
    json_leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=30,
)
values = st.one_of(st.text(max_size=200), st.integers(), st.floats(), st.binary(max_size=20), st.none(), json_like)


@pytest.fixture(scope="module")
def idle(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemoryClient]:
    """A client whose broker has no worker (Redis DB 12), so anything it enqueues stays countable."""
    url = redis_url.rsplit("/", 1)[0] + "/12"
    redis.Redis.from_url(url).flushdb()
    with MemoryClient(make_settings(url, tmp_path_factory.mktemp("idle"))) as client:
        yield client
    redis.Redis.from_url(url).flushdb()


def _queued(client: MemoryClient) -> int:
    return queued_tasks(redis.Redis.from_url(client.settings.broker_url), client.settings)


def _finite(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


@PROPERTY
@given(namespace=st.text(max_size=80), key=st.text(max_size=140))
def test_any_namespace_and_key_is_accepted_or_refused_cleanly(idle: MemoryClient, namespace: str, key: str):
    try:
        ltm = idle.long_term(namespace, key)
    except InvalidRequestError:
        return
    assert ":" not in ltm.namespace + ltm.key
    assert "*" not in ltm.namespace + ltm.key
    assert ltm.namespace.strip(".")


@PROPERTY
@given(items=st.lists(values, max_size=5), metadata=st.lists(json_like, max_size=5))
def test_any_add_is_accepted_or_refused_with_nothing_enqueued(
    idle: MemoryClient, items: list[Any], metadata: list[Any]
):
    before = _queued(idle)
    metadatas = metadata if len(metadata) == len(items) else None
    try:
        idle.long_term("tenant", "k").add(MemorySet(name="notes"), items, metadatas=metadatas, wait=False)
    except InvalidRequestError:
        assert _queued(idle) == before
        return
    assert all(isinstance(i, str) for i in items)
    assert metadatas is None or all(isinstance(m, dict) and _finite(m) for m in metadatas)
    assert _queued(idle) == before + (1 if items else 0)


raw_requests = st.one_of(
    json_like,
    st.fixed_dictionaries(
        {"v": st.sampled_from([1, 2, "1", None]), "namespace": st.text(max_size=10), "key": st.text(max_size=10)},
        optional={"set_name": st.text(max_size=10), "items": json_like},
    ),
)


@PROPERTY
@given(request=raw_requests)
def test_raw_add_messages_never_write_and_never_stop_the_worker(client: MemoryClient, namespace: str, request):
    try:
        json.dumps(request, allow_nan=False)
    except ValueError:
        return  # not JSON at all: kombu refuses to serialize it before it reaches the broker
    probe = client.long_term(namespace, "probe").get_or_create_memory_set("probe", dedup="none")
    before = probe.get()
    publish_raw(client.settings, routing.ADD, {"request": request})
    probe.add(["alive"])  # the worker still answers on the same queue
    after = probe.get()
    assert after[: len(before)] == before
    assert [i.value for i in after[len(before) :]] == ["alive"]  # and nothing of the junk landed here


def test_after_a_flood_of_raw_junk_the_worker_serves_and_the_bystander_is_untouched(
    client: MemoryClient, namespace: str, raw_redis
):
    bystander = client.long_term(namespace, "bystander").get_or_create_memory_set("notes")
    bystander.add(["untouched"], ids=["b"])
    junk: list[dict[str, Any]] = [
        {"request": None},
        {"request": {"namespace": namespace, "key": "bystander", "set_name": "notes", "v": 2, "items": []}},
        {"request": {"namespace": namespace, "key": "bystander", "set_name": "notes", "v": 1, "items": [{"id": "x"}]}},
        {"request": {"namespace": "*", "key": "bystander", "set_name": "notes", "v": 1, "items": []}},
        {"request": {"namespace": namespace, "key": "../bystander", "set_name": "notes", "v": 1, "items": []}},
        {"unexpected": "argument"},
    ]
    for kwargs in junk:
        publish_raw(client.settings, routing.ADD, kwargs)
    bystander.add(["still served"], ids=["c"])  # behind the junk on the same queue
    assert [i.value for i in bystander.get()] == ["untouched", "still served"]

    def letters() -> int:
        routable = raw_redis.llen(client.keys.dead_letters(namespace))
        return int(routable) + int(raw_redis.llen(client.keys.unroutable_dead_letters()))

    wait_for(lambda: letters() == len(junk))  # every piece of junk kept for inspection, none lost
    assert raw_redis.llen(client.keys.dead_letters(namespace)) == 3  # the three that name this namespace validly
