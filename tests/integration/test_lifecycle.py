"""Item lifecycle through a real worker: expiry, pinning, eviction, access times, deduplication."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from celery import Celery

from memory_core import ChatMessage, EvictionPolicy, InvalidRequestError, MemoryClient
from memory_core.core import routing
from memory_core.core.models import Scope
from memory_core.workers import services

from .rawbroker import publish_raw
from .waiting import wait_for


def run_sweep(client: MemoryClient, task: str, celery_app: Celery, marker: str) -> None:
    """Sends a maintenance task the way beat does and waits until it has run."""
    stats = services.get(celery_app).redis
    before = int(stats.hget(client.keys.maintenance_stats(), f"{marker}:ran") or 0)
    stats.delete(client.keys.sweep_lock(marker))
    publish_raw(client.settings, task, {})
    wait_for(lambda: int(stats.hget(client.keys.maintenance_stats(), f"{marker}:ran") or 0) > before)


def test_expired_items_vanish_at_once_and_the_sweep_deletes_them(client: MemoryClient, namespace: str, worker):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    ids = notes.add(["short-lived fact", "lasting fact"], ttl=[1, None])
    assert notes.size() == 2
    assert len(notes.search("fact", limit=5)) == 2  # and now cached
    time.sleep(1.2)
    assert [i.id for i in notes.get()] == [ids[1]]
    assert [i.id for i in notes.get(ids)] == [ids[1]]
    assert [h.id for h in notes.search("fact", limit=5)] == [ids[1]]
    assert notes.size() == 1
    store = services.get(worker).memory.store
    scope = Scope(namespace, "u", "notes")
    assert (scope, ids[0]) in store.expired(time.time(), 10_000)  # invisible, not yet deleted
    run_sweep(client, routing.TTL_SWEEP, worker, "ttl_sweep")
    assert (scope, ids[0]) not in store.expired(time.time(), 10_000)


def test_the_sets_default_ttl_applies_and_pinned_items_never_expire(client: MemoryClient, namespace: str, worker):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes", ttl_seconds=1)
    ids = notes.add(["fleeting", "pinned one"], pinned=[False, True])
    fleeting, pinned = notes.get(ids)
    assert fleeting.expires_at is not None
    assert pinned.expires_at is None  # the set's TTL does not apply to it: no expiry to show, past or future
    time.sleep(1.2)
    run_sweep(client, routing.TTL_SWEEP, worker, "ttl_sweep")
    (kept,) = notes.get()
    assert (kept.id, kept.expires_at) == (ids[1], None)


def test_explicit_expires_at_and_lifecycle_fields_are_stored(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    when = datetime.now(UTC) + timedelta(hours=1)
    (item_id,) = notes.add(["x"], importance=0.9, source="crm", expires_at=when)
    (item,) = notes.get([item_id])
    assert (item.importance, item.source, item.pinned) == (0.9, "crm", False)
    assert item.expires_at is not None
    assert abs((item.expires_at - when).total_seconds()) < 0.001
    with pytest.raises(InvalidRequestError, match="both ttl and expires_at"):
        notes.add(["y"], ttl=5, expires_at=when)
    with pytest.raises(InvalidRequestError, match="importance"):
        notes.add(["y"], importance=1.5)
    with pytest.raises(InvalidRequestError, match="2 values of 'ttl' for 1 items"):
        notes.add(["y"], ttl=[1, 2])


def test_lru_evicts_the_least_recently_read_item(client: MemoryClient, namespace: str, worker):
    notes = client.long_term(namespace, "u").get_or_create_memory_set(
        "notes", eviction=EvictionPolicy(max_items=3, policy="lru")
    )
    (a,) = notes.add(["apples are red"])
    (b,) = notes.add(["bananas are yellow"])
    (_c,) = notes.add(["cherries are dark"])
    time.sleep(0.01)
    notes.get([a])  # read through get
    assert notes.search("bananas are yellow", limit=1)[0].id == b  # read through search
    (d,) = notes.add(["dates are sweet"])
    run_sweep(client, routing.EVICT, worker, "evict")
    assert sorted(i.id for i in notes.get()) == sorted([a, b, d])


def test_importance_eviction_drops_the_least_important_and_keeps_pinned(client: MemoryClient, namespace: str, worker):
    notes = client.long_term(namespace, "u").get_or_create_memory_set(
        "notes", eviction=EvictionPolicy(max_items=2, policy="importance")
    )
    ids = notes.add(["vital", "trivial", "middling", "trivial but pinned"], importance=[0.9, 0.1, 0.5, 0.0],
                    pinned=[False, False, False, True])  # fmt: skip
    run_sweep(client, routing.EVICT, worker, "evict")
    assert sorted(str(i.value) for i in notes.get()) == ["trivial but pinned", "vital"]
    assert len(ids) == 4


def test_reads_update_last_accessed_time_after_the_flush(client: MemoryClient, namespace: str, worker):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    (item_id,) = notes.add(["read me"])
    (before,) = notes.get([item_id])
    time.sleep(0.05)
    notes.search("read me", limit=1)
    run_sweep(client, routing.FLUSH_ACCESS, worker, "flush_access")
    store = services.get(worker).memory.store
    (after,) = store.retrieve(Scope(namespace, "u", "notes"), [item_id])
    assert after.last_accessed_time > before.last_accessed_time


def test_exact_dedup_folds_the_same_normalized_text_into_one_item(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    first = notes.add(["Alice likes tea"], metadatas=[{"a": 1}])
    again = notes.add(["  alice LIKES   tea "], metadatas=[{"b": 2}])
    assert again == first
    (item,) = notes.get()
    assert item.value == "Alice likes tea"
    assert item.additional_metadata == {"a": 1, "b": 2}
    assert notes.add(["x", "X", "y"]) [0] == notes.add(["x"])[0]  # fmt: skip
    assert notes.size() == 3


def test_chat_sets_keep_repeated_turns_by_default(client: MemoryClient, namespace: str):
    chat = client.long_term(namespace, "u").get_or_create_memory_set("chat", item_type=ChatMessage)
    chat.add([ChatMessage(content="yes"), ChatMessage(content="yes")])
    assert chat.size() == 2


def test_semantic_dedup_keeps_the_closer_existing_item(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes", dedup="semantic", dedup_threshold=0.9)
    (kept,) = notes.add(["Alice prefers green tea in the morning"], metadatas=[{"source": "chat"}])
    assert notes.add(["Alice prefers green tea in the morning."], metadatas=[{"seen": 2}]) == [kept]
    notes.add(["Bob's flight to Tokyo leaves on Friday"])
    assert notes.size() == 2
    (item,) = notes.get([kept])
    assert item.additional_metadata == {"source": "chat", "seen": 2}


def test_two_concurrent_writers_of_the_same_text_leave_one_item(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    barrier = threading.Barrier(4)

    def write() -> None:
        barrier.wait()
        notes.add(["the same fact, written four times at once"])

    threads = [threading.Thread(target=write) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert notes.size() == 1
