"""Formation across worker lifetimes: a daily budget that defers and a larger one that forms on resume, workers
without a model that keep the user's turns and a replay once one has a key, a worker that serves the formation
queue alone, and a formation that outlives its scope lock's TTL.

Each test runs its own in-thread workers (custom settings, queues of a key prefix of their own, so the session's
worker takes none of their tasks) over one store directory, one worker open on it at a time, and the real
anthropic SDK against a fake Messages API.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from memory_core import MemoryClient
from memory_core.client.admin import Admin
from memory_core.core import routing
from memory_core.core.errors import NoWorkerAvailable
from memory_core.core.messages import FormationRecord
from memory_core.core.models import VERBATIM, MemorySetItem
from memory_core.core.settings import Settings
from memory_core.testing.fake_anthropic import FakeAnthropic
from memory_core.workers import services
from memory_core.workers.app import create_app

from .conftest import make_settings
from .in_thread import in_thread_worker
from .waiting import wait_for

KEYED = {"api_key": "sk-ant-test-not-real", "max_retries": 0, "timeout": 30}


def _settings(redis_url: str, store: Path, prefix: str, **overrides: Any) -> Settings:
    return make_settings(
        redis_url,
        store,
        redis={"url": redis_url, "key_prefix": prefix},  # queues of their own: the session's worker takes none
        embedder={"model": "hashing"},
        **overrides,
    )


@contextmanager
def _worker(settings: Settings, **options: Any) -> Iterator[tuple[MemoryClient, Celery]]:
    """A client, and the app of an in-thread worker of ``settings``; its store is closed after it stops."""
    app = create_app(settings)
    try:
        with in_thread_worker(app, concurrency=2, **options), MemoryClient(settings) as client:
            yield client, app
    finally:
        services.close(app)


def _formation_calls(fake: FakeAnthropic) -> int:
    return sum(1 for body in fake.requests if body.get("tool_choice", {}).get("name") == "record_memories")


def _texts(items: list[MemorySetItem]) -> list[str]:
    return sorted(str(item.value) for item in items)


@pytest.fixture
def prefix() -> str:
    return f"mclife{uuid.uuid4().hex[:8]}"


@pytest.mark.timeout(180)
def test_over_its_daily_tokens_a_namespace_defers_keeping_the_messages_and_a_larger_budget_forms_them_on_resume(
    redis_url: str, tmp_path: Path, prefix: str, fake_anthropic: FakeAnthropic, raw_redis: redis.Redis
):
    store = tmp_path / "qdrant"
    anthropic = {**KEYED, "base_url": fake_anthropic.url}
    small = _settings(redis_url, store, prefix, anthropic=anthropic, formation={"daily_tokens": 10})
    later = [
        [{"role": "user", "content": "I like green tea", "id": "t1"}],
        [{"role": "user", "content": "My sister is called Marta", "id": "t2"}],
    ]
    with _worker(small) as (client, _):
        memory = client.long_term("acme", "ana")
        first = memory.remember([{"role": "user", "content": "I live in Porto", "id": "p1"}], wait=True)
        assert first.status == "done"
        assert first.input_tokens + first.output_tokens > 10  # this one spent past the budget
        deferred = [memory.remember(messages, wait=True) for messages in later]
        assert [r.status for r in deferred] == ["deferred", "deferred"]
        assert all("MEMORY_FORMATION__DAILY_TOKENS" in r.notes[0] for r in deferred)
        assert [memory.operation(r.op_id).status for r in deferred] == ["deferred", "deferred"]
        assert _formation_calls(fake_anthropic) == 1
        assert _texts(memory.get("facts")) == ["I live in Porto"]
        for receipt, messages in zip(deferred, later, strict=True):  # kept, to be formed later
            raw = raw_redis.get(client.keys.formation_operation("acme", "ana", receipt.op_id))
            assert raw is not None
            kept = FormationRecord.model_validate_json(raw).request
            assert kept is not None
            assert [m.content for m in kept.messages] == [messages[0]["content"]]
        # Still over the budget: a resume sends them, and they are deferred again; nothing is lost.
        assert Admin(client).formation_resume("acme").sent == 2
        wait_for(lambda: raw_redis.zcard(client.keys.formation_deferred("acme")) == 2, timeout=30)
        assert [memory.operation(r.op_id).status for r in deferred] == ["deferred", "deferred"]
        assert _formation_calls(fake_anthropic) == 1

    larger = _settings(redis_url, store, prefix, anthropic=anthropic, formation={"daily_tokens": 1_000_000})
    with _worker(larger) as (client, app):
        memory = client.long_term("acme", "ana")
        app.send_task(routing.FORMATION_RESUME_DUE)  # what beat sends: the namespace has budget now
        wait_for(lambda: all(memory.operation(r.op_id).status == "done" for r in deferred), timeout=60)
        assert _formation_calls(fake_anthropic) == 3
        assert _texts(memory.get("facts")) == ["I like green tea", "I live in Porto", "My sister is called Marta"]
        assert [str(hit.value) for hit in memory.search("facts", "green tea", limit=1)] == ["I like green tea"]
        assert raw_redis.zcard(client.keys.formation_deferred("acme")) == 0
        assert not raw_redis.sismember(client.keys.formation_deferred_namespaces(), "acme")
        assert Admin(client).formation_resume("acme").sent == 0


@pytest.mark.timeout(180)
def test_without_a_key_the_users_turns_are_kept_verbatim_and_a_replay_with_one_forms_them(
    redis_url: str, tmp_path: Path, prefix: str, fake_anthropic: FakeAnthropic
):
    store = tmp_path / "qdrant"
    conversation = [
        {"role": "user", "content": "I live in Porto", "id": "v1"},
        {"role": "assistant", "content": "Porto has great bridges", "id": "v2"},
        {"role": "user", "content": "I like green tea", "id": "v3"},
    ]
    with _worker(_settings(redis_url, store, prefix, anthropic={"api_key": None})) as (client, _):
        memory = client.long_term("acme", "ana")
        kept = memory.remember(conversation, wait=True)
        assert (kept.status, kept.formed_by) == ("done", VERBATIM)
        again = memory.remember([{"role": "user", "content": "I like green tea", "id": "v4"}], wait=True)
        assert [d.decision for d in again.decisions] == ["same"]  # confirmed, not kept twice
        receipt = memory.remember([{"role": "user", "content": "I have a cat", "id": "v5"}])
        assert (receipt.status, receipt.formed_by) == ("pending", VERBATIM)  # every live former is verbatim
        wait_for(lambda: memory.operation(receipt.op_id).status == "done", timeout=30)
        verbatim = memory.get("facts")
        assert _texts(verbatim) == ["I have a cat", "I like green tea", "I live in Porto"]  # no assistant turn
        assert all(item.fact is not None and item.fact.formed_by == VERBATIM for item in verbatim)
        sources = {str(item.value): item.fact.sources for item in verbatim if item.fact is not None}
        assert sources == {"I live in Porto": ["v1"], "I like green tea": ["v3", "v4"], "I have a cat": ["v5"]}
    assert _formation_calls(fake_anthropic) == 0

    keyed = _settings(redis_url, store, prefix, anthropic={**KEYED, "base_url": fake_anthropic.url})
    with _worker(keyed) as (client, _):
        memory = client.long_term("acme", "ana")
        assert memory.remember([{"role": "user", "content": "I swim", "id": "v6"}]).formed_by is None
        assert Admin(client).formation_replay("acme", "ana").sent == 1
        model = keyed.formation.model

        def replayed() -> bool:
            live = memory.search("facts", "Porto tea cat", limit=10)
            return {i.fact.formed_by for i in live if i.fact is not None and "swim" not in str(i.value)} == {model}

        wait_for(replayed, timeout=60)
        live = [i for i in memory.search("facts", "Porto tea cat", limit=10) if "swim" not in str(i.value)]
        assert _texts(live) == ["I have a cat", "I like green tea", "I live in Porto"]
        formed = {str(i.value): i for i in live}
        assert {text: item.fact.sources for text, item in formed.items() if item.fact is not None} == sources
        everything = memory.search("facts", "Porto tea cat", limit=20, include_superseded=True)
        old = [i for i in everything if i.fact is not None and i.fact.formed_by == VERBATIM]
        assert _texts(old) == ["I have a cat", "I like green tea", "I live in Porto"]
        for item in old:
            assert item.fact is not None
            assert not item.fact.live
            assert item.fact.superseded_by == formed[str(item.value)].id
        assert Admin(client).formation_replay("acme", "ana").sent == 0  # nothing verbatim is live any more


@pytest.mark.timeout(180)
def test_a_worker_of_the_formation_queue_alone_forms_while_another_serves_adds_and_searches(
    redis_url: str, tmp_path: Path, prefix: str, fake_anthropic: FakeAnthropic
):
    settings = _settings(redis_url, tmp_path / "qdrant", prefix, anthropic={**KEYED, "base_url": fake_anthropic.url})
    app = create_app(settings)  # one store directory: both workers run the one app's services
    others = [queue for queue in routing.QUEUES if queue != routing.FORMATION_QUEUE]
    try:
        with in_thread_worker(app, queues=[routing.FORMATION_QUEUE]), MemoryClient(settings) as client:
            memory = client.long_term("acme", "ana")
            receipt = memory.remember([{"role": "user", "content": "I live in Porto", "id": "q1"}], wait=True)
            assert receipt.status == "done"
            with pytest.raises(NoWorkerAvailable, match="memory.write|memory.read"):  # it serves no other queue
                memory.get_or_create_memory_set("notes")
            with in_thread_worker(app, queues=others):
                memory.get_or_create_memory_set("notes").add(["a note"], wait=True)
                assert [str(hit.value) for hit in memory.search("notes", "note", limit=1)] == ["a note"]
                assert [str(hit.value) for hit in memory.search("facts", "Porto", limit=1)] == ["I live in Porto"]
                later = memory.remember([{"role": "user", "content": "I like green tea", "id": "q2"}], wait=True)
                assert later.status == "done"
                assert memory.size("facts") == 2
    finally:
        services.close(app)


@pytest.mark.timeout(180)
def test_a_formation_slower_than_its_lock_ttl_keeps_its_scope_so_a_second_one_confirms_instead_of_adding(
    redis_url: str, tmp_path: Path, prefix: str
):
    with FakeAnthropic() as slow:
        slow.latency = (8.0, 8.0)  # each model answer takes longer than the scope lock's 5 s TTL
        settings = _settings(
            redis_url,
            tmp_path / "qdrant",
            prefix,
            anthropic={**KEYED, "base_url": slow.url},
            formation={"lock_ttl": 5, "busy_retry": 0.5},
            client={"timeout": 120},
        )
        with _worker(settings) as (client, _):
            memory = client.long_term("acme", "ana")
            receipts = {}

            def remember(message_id: str) -> None:
                said = [{"role": "user", "content": "My dog is called Rex", "id": message_id}]
                receipts[message_id] = memory.remember(said, wait=True)

            first = threading.Thread(target=remember, args=("d1",))
            first.start()
            wait_for(lambda: slow.in_flight == 1, timeout=30)  # the first holds the scope, waiting on the model
            remember("d2")
            first.join(60)
            assert [receipts[m].decisions[0].decision for m in ("d1", "d2")] == ["add", "same"]
            (fact,) = memory.get("facts")
            assert fact.fact is not None
            assert fact.fact.sources == ["d1", "d2"]
