"""The client's L1/L2 caches: hits without tasks, never a stale result, embeddings cached in the worker."""

from __future__ import annotations

import json
import threading

import pytest

from memory_core import MemoryClient, MemoryCoreError
from memory_core.core.settings import Settings
from memory_core.workers import services


def _no_tasks(client: MemoryClient, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> dict[str, object]:
        raise MemoryCoreError("a task was sent although the cache should have answered")

    monkeypatch.setattr(client.dispatcher, "call", refuse)


def test_cached_searches_and_gets_are_answered_without_a_task(
    client: MemoryClient, namespace: str, monkeypatch: pytest.MonkeyPatch
):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    ids = notes.add(["green tea in the morning", "flight to Tokyo"])
    first = notes.search("tea", limit=2)
    notes.get(ids)
    _no_tasks(client, monkeypatch)
    assert notes.search("tea", limit=2) == first
    assert [i.id for i in notes.get(ids)] == ids
    stats = client.stats()
    assert stats.l1_hits >= 3
    assert stats.l1_entries >= 3


def test_another_process_is_served_from_l2(client: MemoryClient, settings, namespace: str, monkeypatch):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    notes.add(["shared through redis"])
    expected = notes.search("shared", limit=1)
    with MemoryClient(settings) as other:
        _no_tasks(other, monkeypatch)
        assert other.long_term(namespace, "u").search("notes", "shared", limit=1) == expected
        assert other.stats().l2_hits == 1


def test_a_write_makes_cached_results_unreachable(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    notes.add(["tea one"])
    assert len(notes.search("tea", limit=10)) == 1
    notes.add(["tea two"])
    assert len(notes.search("tea", limit=10)) == 2
    (only,) = notes.search("tea two", limit=1)
    notes.delete([only.id])
    assert [h.value for h in notes.search("tea", limit=10)] == ["tea one"]


def test_no_stale_search_under_concurrent_writes(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    stop = threading.Event()

    def read_constantly() -> None:
        while not stop.is_set():
            notes.search("ledger entry", limit=100)

    readers = [threading.Thread(target=read_constantly) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        for i in range(15):
            (item_id,) = notes.add([f"ledger entry number {i}"])
            seen = {h.id for h in notes.search("ledger entry", limit=100)}
            assert item_id in seen, f"write {i} was acknowledged but a cached search missed it"
    finally:
        stop.set()
        for reader in readers:
            reader.join()


def test_a_repeated_text_is_embedded_once(client: MemoryClient, namespace: str, worker):
    cache = services.get(worker).memory.embeddings
    assert cache is not None
    ltm = client.long_term(namespace, "u")
    ltm.get_or_create_memory_set("first").add(["a sentence embedded exactly once"])
    misses, hits = cache.misses, cache.hits
    ltm.get_or_create_memory_set("second").add(["a sentence embedded exactly once"])
    assert cache.misses == misses
    assert cache.hits == hits + 1


def test_written_texts_are_cached_for_less_time_than_queries(
    client: MemoryClient, namespace: str, worker, settings: Settings, raw_redis
):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    notes.add(["a sentence that was written"])
    notes.search("a question that was asked", limit=1)
    written, asked = sorted(raw_redis.ttl(key) for key in raw_redis.keys(f"*:{namespace}:embedding:*"))
    assert 0 < written <= settings.cache.write_embedding_ttl
    assert settings.cache.write_embedding_ttl < asked <= settings.cache.embedding_ttl


def test_cached_vectors_are_exactly_the_embedded_ones_and_old_entries_still_hit(worker, raw_redis, namespace: str):
    cache = services.get(worker).memory.embeddings
    assert cache is not None
    text = "a sentence whose vector is cached"
    (fresh,) = cache.embed_many([(namespace, text)])
    (key,) = raw_redis.keys(f"*:{namespace}:embedding:*")
    assert set(json.loads(raw_redis.get(key))) == {"f32"}  # packed, not a list of decimals
    hits = cache.hits
    assert cache.embed_many([(namespace, text)]) == [fresh]
    raw_redis.set(key, json.dumps(fresh))  # how an earlier version cached it
    assert cache.embed_many([(namespace, text)]) == [fresh]
    assert cache.hits == hits + 2
