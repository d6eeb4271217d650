"""At-least-once delivery: redelivered writes change nothing; failures come back typed and are dead-lettered."""

from __future__ import annotations

import json

import pytest

from memory_core import InvalidRequestError, MemoryClient
from memory_core.core import routing
from memory_core.core.settings import Settings

from .rawbroker import add_kwargs, publish_raw
from .waiting import wait_for


def test_the_same_add_message_delivered_twice_leaves_one_copy(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    kwargs = add_kwargs(namespace, "a", "remember me")
    task_id = publish_raw(client.settings, routing.ADD, kwargs)
    publish_raw(client.settings, routing.ADD, kwargs, task_id=task_id)  # a redelivery
    client.dispatcher.wait(namespace, task_id)
    client.dispatcher.wait(namespace, task_id)  # both deliveries replied
    assert [(i.id, i.value) for i in notes.get()] == [("a", "remember me")]
    assert notes.size() == 1


def test_a_message_of_an_unknown_schema_version_is_refused_and_dead_lettered(
    client: MemoryClient, namespace: str, raw_redis, settings: Settings
):
    client.long_term(namespace, "u").get_or_create_memory_set("notes")
    payload = {"v": 99, "namespace": namespace, "key": "u", "set_name": "notes", "items": []}
    task_id = publish_raw(client.settings, routing.ADD, {"request": payload})
    with pytest.raises(InvalidRequestError, match="v"):
        client.dispatcher.wait(namespace, task_id)
    key = client.keys.dead_letters(namespace)
    wait_for(lambda: raw_redis.llen(key) == 1)
    letter = json.loads(raw_redis.lindex(key, 0))
    assert letter["task"] == routing.ADD
    assert letter["task_id"] == task_id
    assert letter["kwargs"] == {"request": payload}  # the payload is kept for replay
    assert letter["error"]["type"] == "InvalidRequestError"
    assert raw_redis.sismember(client.keys.dead_letter_namespaces(), namespace)


def test_a_message_naming_no_valid_namespace_goes_to_the_unroutable_dead_letters(client: MemoryClient, raw_redis):
    publish_raw(client.settings, routing.ADD, {"request": {"namespace": "a:b", "v": 1}})
    wait_for(lambda: raw_redis.llen(client.keys.unroutable_dead_letters()) == 1)


def test_a_failed_read_is_reported_but_not_dead_lettered(client: MemoryClient, namespace: str, raw_redis):
    payload = {"v": 1, "namespace": namespace, "key": "u", "set_name": "missing", "query": "q", "limit": 1}
    task_id = publish_raw(client.settings, routing.SEARCH, {"request": payload})
    from memory_core import MemorySetNotFound

    with pytest.raises(MemorySetNotFound):
        client.dispatcher.wait(namespace, task_id)
    assert raw_redis.llen(client.keys.dead_letters(namespace)) == 0
