"""Dead letters keep the payload of a failed write; replaying lands it, and replaying twice changes nothing."""

from __future__ import annotations

import pytest

from memory_core import InvalidRequestError, MemoryClient, MemorySet, MemorySetNotFound, SetDefinitionConflict
from memory_core.client.admin import Admin
from memory_core.client.deadletters import DeadLetters

from .waiting import wait_for


def test_a_failed_write_is_replayed_once_its_cause_is_fixed(client: MemoryClient, namespace: str, raw_redis):
    ltm = client.long_term(namespace, "u")
    with pytest.raises(MemorySetNotFound):
        ltm.add(MemorySet(name="notes"), ["kept in the dead letter"], ids=["x"])  # the set does not exist yet
    letters = DeadLetters(raw_redis, client.keys, client.dispatcher)
    assert namespace in letters.namespaces()
    (letter,) = letters.entries(namespace)
    assert letter.task == "memory.add"
    assert letter.error["type"] == "MemorySetNotFound"
    assert letter.payload["request"]["items"][0]["value"] == "kept in the dead letter"

    notes = ltm.get_or_create_memory_set("notes")  # the cause is fixed
    raw = [letter.model_dump(by_alias=True) for letter in letters.entries(namespace)]
    assert len(letters.replay(namespace)) == 1
    wait_for(lambda: notes.size() == 1)
    assert letters.entries(namespace) == []
    assert namespace not in letters.namespaces()

    # Replaying the same letter again (say, from a saved copy) writes the same point: still one item.
    raw_redis.rpush(client.keys.dead_letters(namespace), *[_json(r) for r in raw])
    assert len(letters.replay(namespace)) == 1
    wait_for(lambda: raw_redis.llen(client.keys.dead_letters(namespace)) == 0)
    notes.add(["barrier"], ids=["y"])  # the same write queue: the replay ahead of it has been handled
    assert [i.id for i in notes.get()] == ["x", "y"]


def test_drop_removes_a_namespaces_letters(client: MemoryClient, namespace: str, raw_redis):
    with pytest.raises(MemorySetNotFound):
        client.long_term(namespace, "u").add(MemorySet(name="missing"), ["x"])
    letters = DeadLetters(raw_redis, client.keys, client.dispatcher)
    assert letters.drop(namespace) == 1
    assert letters.entries(namespace) == []


def _json(letter: dict[str, object]) -> str:
    import json

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
