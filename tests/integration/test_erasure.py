"""Erasure: after forget, nothing of the key (or namespace) can be read by any path, caches included."""

from __future__ import annotations

import json

import pytest
from celery import Celery

from memory_core import InvalidRequestError, MemoryClient, MemorySetNotFound
from memory_core.core import routing
from memory_core.core.models import Scope
from memory_core.core.settings import Settings
from memory_core.workers import services
from tests.integration.rawbroker import publish_raw
from tests.integration.waiting import wait_for


def _redis_text(raw_redis, pattern: str) -> str:
    """Every string, list and hash value under ``pattern``, as one text (to look for leaked memory text)."""
    parts = []
    for key in raw_redis.scan_iter(pattern):
        kind = raw_redis.type(key).decode()
        if kind == "string":
            parts.append(raw_redis.get(key).decode(errors="replace"))
        elif kind == "list":
            parts.extend(v.decode(errors="replace") for v in raw_redis.lrange(key, 0, -1))
        elif kind == "hash":
            parts.extend(f"{k!r}{v!r}" for k, v in raw_redis.hgetall(key).items())
        elif kind == "stream":
            parts.extend(repr(fields) for _, fields in raw_redis.xrange(key))
        elif kind == "zset":
            parts.extend(repr(member) for member in raw_redis.zrange(key, 0, -1))
    return "\n".join(parts)


def _every_read_fails(ltm) -> None:
    for call in (
        lambda: ltm.get_memory_set("notes"),
        lambda: ltm.get("notes"),
        lambda: ltm.get("notes", ["x"]),
        lambda: ltm.search("notes", "secret", limit=5),
        lambda: ltm.size("notes"),
    ):
        with pytest.raises(MemorySetNotFound):
            call()


def test_forgetting_a_key_erases_it_everywhere_and_spares_the_others(
    client: MemoryClient, settings: Settings, namespace: str, raw_redis, worker: Celery
):
    mine, theirs = client.long_term(namespace, "k1"), client.long_term(namespace, "k2")
    notes = mine.get_or_create_memory_set("notes")
    notes.add(["secret of k1: the vault code is 4711"], ids=["x"])
    notes.search("secret", limit=5)  # cached in L1 and L2
    notes.get(["x"])  # cached too
    # A message of a schema version the worker does not know is kept, payload and all, in the dead letters.
    newer = {"v": 2, "namespace": namespace, "key": "k1", "set_name": "ghost", "items": ["secret of k1 in a letter"]}
    with pytest.raises(InvalidRequestError):
        client.dispatcher.wait(namespace, publish_raw(settings, routing.ADD, {"request": newer}))
    other = theirs.get_or_create_memory_set("notes")
    other.add(["secret of k2"], ids=["x"])

    receipt = client.forget(namespace, "k1")
    assert (receipt.items, receipt.sets, receipt.dead_letters) == (1, 1, 1)
    assert receipt.redis_keys >= 3  # the definition, the cached item and the cached search at least

    _every_read_fails(mine)
    with MemoryClient(settings) as fresh:  # another process: L2 paths
        _every_read_fails(fresh.long_term(namespace, "k1"))
    assert services.get(worker).memory.store.list_items(Scope(namespace, "k1", "notes")) == []
    assert "secret of k1" not in _redis_text(raw_redis, client.keys.namespace_pattern(namespace))
    assert [i.value for i in other.get()] == ["secret of k2"]
    assert [h.value for h in other.search("secret", limit=5)] == ["secret of k2"]


def test_forgetting_a_namespace_leaves_only_version_counters(client: MemoryClient, namespace: str, raw_redis):
    for key in ("a", "b"):
        memory_set = client.long_term(namespace, key).get_or_create_memory_set("notes")
        memory_set.add([f"secret of {key}"])
        memory_set.search("secret", limit=1)
    receipt = client.forget(namespace)
    assert (receipt.items, receipt.sets) == (2, 2)
    left = [k.decode() for k in raw_redis.scan_iter(client.keys.namespace_pattern(namespace))]
    assert all(":version:" in k for k in left), left
    for key in ("a", "b"):
        _every_read_fails(client.long_term(namespace, key))


def test_forgetting_a_key_erases_its_state_sessions_checkpoints_and_promoted_messages(
    client: MemoryClient, namespace: str, raw_redis
):
    with client.short_term(namespace, "k1") as stm:
        stm.set("secret", "short-term secret of k1")
    sensory = client.sensory(namespace, "k1")  # a run still going when the user asks to be forgotten
    sensory.set("secret", "sensory secret of k1")
    sensory.persist()
    session = client.session(namespace, "chat-1", key="k1")
    memory = session.summary(max_tokens=5)
    memory.save({"input": "session secret of k1"}, {"output": "ok"})
    memory.save({"input": "another session secret of k1"}, {"output": "ok"})
    client.checkpoints(namespace).put("k1", {"state": "checkpoint secret of k1"})
    with client.short_term(namespace, "k2") as kept:
        kept.set("secret", "secret of k2")
    promoted = session.promotion_set()
    wait_for(lambda: promoted.size() == 4, 30)  # promotion is asynchronous: let it land first

    receipt = client.forget(namespace, "k1")
    assert receipt.items == 4
    assert "secret of k1" not in _redis_text(raw_redis, client.keys.namespace_pattern(namespace))
    assert client.short_term(namespace, "k1").get_field_names() == []
    assert client.sensory(namespace, "k1").get_field_names() == []
    assert client.session(namespace, "chat-1", key="k1").buffer().load()["history"] == ""
    assert client.session(namespace, "chat-1", key="k1").summary_state().summary == ""
    assert client.checkpoints(namespace).list("k1") == []
    _every_read_fails_for(client.long_term(namespace, "k1"), promoted.name)
    assert client.short_term(namespace, "k2").get("secret") == "secret of k2"


def _every_read_fails_for(ltm, set_name: str) -> None:
    with pytest.raises(MemorySetNotFound):
        ltm.get(set_name)


def test_forgetting_a_key_erases_its_console_audit_entries_and_spares_the_others(
    client: MemoryClient, namespace: str, raw_redis
):
    log = client.keys.console_audit(namespace)
    entries = [
        {
            "who": "token abc",
            "at": "2026-11-28T00:00:00Z",
            "what": "edit",
            "target": {"key": key, "set": "s", "id": "i"},
            "before": {"value": f"secret of {key}"},
            "after": {"value": "x"},
        }
        for key in ("alice", "bob", "alice")
    ]
    raw_redis.lpush(log, *[json.dumps(e) for e in entries], "not json")
    client.forget(namespace, "alice")
    left = raw_redis.lrange(log, 0, -1)
    assert b"secret of alice" not in b"".join(left)
    assert sum(b"secret of bob" in e for e in left) == 1
    assert b"not json" in left
