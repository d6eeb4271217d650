"""The write micro-batcher with the in-memory store: batches form, each request gets its own outcome."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from memory_core.core.errors import InvalidRequestError, TransientStoreError
from memory_core.core.models import MemorySet
from memory_core.core.settings import LimitsSettings
from memory_core.engine.batching import AddBatcher, _Pending
from memory_core.engine.embedders.hashing import HashingEmbedder
from memory_core.engine.service import MemoryService
from memory_core.engine.stores.memory import InMemoryVectorStore


class _CountingEmbedder(HashingEmbedder):
    """Records the size of every embedder call, and can be made to fail."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []
        self.fail = False

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.fail:
            raise TransientStoreError("embedder down")
        self.calls.append(len(texts))
        return super().embed(texts)


def _request(set_name: str, item_id: str, value: str, seq: int) -> dict[str, object]:
    now = datetime.now(UTC).isoformat()
    item = {"id": item_id, "value": value, "created_time": now, "seq": seq}
    return {"v": 1, "namespace": "ns", "key": "k", "set_name": set_name, "items": [item]}


@pytest.fixture
def setup() -> tuple[MemoryService, _CountingEmbedder]:
    embedder = _CountingEmbedder()
    service = MemoryService(store=InMemoryVectorStore(), embedder=embedder, limits=LimitsSettings())
    for name in ("a", "b"):
        definition = MemorySet(name=name, dedup="none").model_dump(mode="json")
        service.create_set({"v": 1, "namespace": "ns", "key": "k", "definition": definition})
    return service, embedder


def test_concurrent_small_adds_are_embedded_together_and_all_land(setup):
    service, embedder = setup
    batcher = AddBatcher(service, max_items=64, max_wait=0.2, threads=1)
    replies: dict[int, list[str]] = {}
    start = threading.Barrier(20)

    def one(n: int) -> None:
        start.wait()
        replies[n] = batcher.add(_request("ab"[n % 2], f"id-{n}", f"fact number {n}", n)).ids

    threads = [threading.Thread(target=one, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    batcher.close()
    assert replies == {n: [f"id-{n}"] for n in range(20)}
    assert sum(embedder.calls) == 20
    assert max(embedder.calls) > 1  # items of several requests went through one embedder call
    stored = {
        i.id for name in "ab" for i in service.get({"v": 1, "namespace": "ns", "key": "k", "set_name": name}).items
    }
    assert stored == {f"id-{n}" for n in range(20)}


def test_a_bad_request_fails_alone_and_before_it_is_queued(setup):
    service, _ = setup
    batcher = AddBatcher(service, max_items=64, max_wait=0.0, threads=1)
    with pytest.raises(InvalidRequestError):
        batcher.add(_request("missing-set-name!", "x", "value", 1))
    assert batcher.add(_request("a", "ok", "value", 2)).ids == ["ok"]
    batcher.close()


def test_an_embedder_failure_reaches_every_request_of_the_batch_and_nothing_is_written(setup):
    service, embedder = setup
    batcher = AddBatcher(service, max_items=64, max_wait=0.0, threads=1)
    embedder.fail = True
    with pytest.raises(TransientStoreError):
        batcher.add(_request("a", "lost", "value", 1))
    embedder.fail = False
    assert service.get({"v": 1, "namespace": "ns", "key": "k", "set_name": "a"}).items == []
    assert batcher.add(_request("a", "kept", "value", 2)).ids == ["kept"]  # the batcher lives on
    batcher.close()


def test_adds_to_one_set_are_written_as_one_with_the_sequential_result(setup):
    service, _ = setup
    definition = MemorySet(name="dedup").model_dump(mode="json")  # exact dedup, the text-set default
    service.create_set({"v": 1, "namespace": "ns", "key": "k", "definition": definition})
    first = service.prepare_add(_request("dedup", "one", "Alice likes tea", 1))
    second = service.prepare_add(_request("dedup", "two", "Alice likes tea", 2))  # the same text again
    third = service.prepare_add(_request("dedup", "three", "Bob likes coffee", 3))
    vectors = [service.embed("ns", p.texts) for p in (first, second, third)]
    replies = service.store_add_many([first, second, third], vectors)
    assert [r.ids for r in replies] == [["one"], ["one"], ["three"]]  # the second folded into the first
    stored = service.get({"v": 1, "namespace": "ns", "key": "k", "set_name": "dedup"}).items
    assert [i.id for i in stored] == ["one", "three"]


def test_requests_arriving_together_are_spread_over_the_idle_batch_threads(
    setup: tuple[MemoryService, _CountingEmbedder],
) -> None:
    """Four requests queued at once, two idle batch threads: each takes its fair share (two), so both embed at
    once; one thread taking all four would leave the other core idle (chat turns embed no faster together)."""
    service, embedder = setup
    both_embedding = threading.Barrier(2, timeout=5)
    calls: list[int] = []
    plain = embedder.embed

    def embed(texts: Sequence[str]) -> list[list[float]]:
        calls.append(len(texts))
        both_embedding.wait()  # breaks (and fails the adds) unless two batches embed at the same time
        return plain(texts)

    embedder.embed = embed  # type: ignore[method-assign]
    batcher = AddBatcher(service, max_items=64, max_wait=0.0, threads=2)
    batcher._start()
    waiting = batcher._queue.not_empty
    deadline = time.monotonic() + 10
    while len(waiting._waiters) < 2:  # type: ignore[attr-defined]  # both threads blocked on an empty queue
        assert time.monotonic() < deadline, "the batch threads did not start"
        time.sleep(0.01)
    pending = [_Pending(service.prepare_add(_request("a", f"id-{n}", f"fact {n}", n))) for n in range(4)]
    with waiting:  # all four queued at once, before either thread wakes
        batcher._queued = getattr(batcher, "_queued", 0) + 4  # what add() counts as it queues
        batcher._queue.queue.extend(pending)
        batcher._queue.unfinished_tasks += 4
        waiting.notify(2)
    for request in pending:
        assert request.done.wait(10)
        assert request.error is None
    batcher.close()
    assert sorted(calls) == [2, 2]
