"""A session feeding formation (``form_into``): debounced per session on the queue, each message formed once.

The worker forms through the real anthropic SDK against the fake Messages API, whose rule-based "model" makes
each user message a fact; a formation is one request with the forced tool ``record_memories``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from functools import partial
from typing import Any

import pytest
import redis

from memory_core import AsyncMemoryClient, ChatMessage, InvalidRequestError, MemoryClient, MessageRole
from memory_core.core.messages import FormationRecord
from memory_core.core.steps import Command
from memory_core.testing.fake_anthropic import FakeAnthropic
from memory_core.tiers.session import SessionMessage
from memory_core.tiers.session.formation import _CLAIM
from tests.integration.waiting import broker_drained, wait_for

KEY = "ana"


def formation_requests(fake: FakeAnthropic) -> list[dict[str, Any]]:
    return [r for r in fake.requests if r.get("tool_choice", {}).get("name") == "record_memories"]


def ran_operations(raw_redis: redis.Redis, client: MemoryClient, namespace: str) -> list[FormationRecord]:
    """The key's formation operations that ran to the end (a replaced one is done too, but was never formed)."""
    pattern = client.keys.formation_operation(namespace, KEY, "*")
    records = [FormationRecord.model_validate_json(raw_redis.get(name) or b"") for name in raw_redis.scan_iter(pattern)]
    return [r for r in records if r.report.status == "done" and r.request is not None]


def formed_ids(raw_redis: redis.Redis, client: MemoryClient, namespace: str) -> Counter[str]:
    """How many operations that ran took each message id."""
    requests = [r.request for r in ran_operations(raw_redis, client, namespace) if r.request is not None]
    return Counter(m.id for request in requests for m in request.messages)


def wait_until_formed(raw_redis: redis.Redis, client: MemoryClient, namespace: str, entries: list[SessionMessage]):
    """Waits until operations that ran cover every message, and every task sent (the replaced ones too) has run."""
    wanted = {e.id for e in entries}
    wait_for(lambda: wanted <= set(formed_ids(raw_redis, client, namespace)), timeout=60)
    wait_for(lambda: broker_drained(raw_redis, client.settings), timeout=60)


def fact_sources(client: MemoryClient, namespace: str) -> Counter[str]:
    facts = client.long_term(namespace, KEY).get("facts")
    return Counter(source for fact in facts if fact.fact is not None for source in fact.fact.sources)


def user_ids(entries: list[SessionMessage]) -> list[str]:
    return [e.id for e in entries if e.role is MessageRole.USER]


def test_a_burst_of_exchanges_within_debounce_is_formed_once(
    client: MemoryClient, namespace: str, fake_anthropic: FakeAnthropic, raw_redis: redis.Redis
):
    session = client.session(namespace, "chat-1", key=KEY, promote="none", form_into="facts", debounce=0.3, max_wait=30)
    memory = session.buffer()
    for city in ("Lisbon", "Porto", "Braga", "Faro", "Evora"):
        memory.save({"input": f"I have visited {city}"}, {"output": f"{city} sounds lovely"})
    entries = session.history.entries()
    wait_until_formed(raw_redis, client, namespace, entries)

    assert len(formation_requests(fake_anthropic)) == 1
    (operation,) = ran_operations(raw_redis, client, namespace)
    assert operation.request is not None
    assert [m.id for m in operation.request.messages] == [e.id for e in entries]  # the session's own ids
    assert [m.at for m in operation.request.messages] == [e.created_at for e in entries]
    assert fact_sources(client, namespace) == Counter(user_ids(entries))
    memory_lt = client.long_term(namespace, KEY)
    assert "I have visited Faro" in [str(hit.value) for hit in memory_lt.search("facts", "Faro", limit=5)]

    # A session message id is a source: forgetting it removes the fact that rests on it alone.
    report = memory_lt.forget_sources([user_ids(entries)[0]])
    assert report.removed == 1
    assert "I have visited Lisbon" not in [str(f.value) for f in memory_lt.get("facts")]


def test_a_stream_longer_than_max_wait_is_formed_while_it_goes_on(
    client: MemoryClient, namespace: str, fake_anthropic: FakeAnthropic, raw_redis: redis.Redis
):
    session = client.session(
        namespace, "chat-2", key=KEY, promote="none", form_into="facts", debounce=0.5, max_wait=1.5
    )
    memory = session.buffer()
    # Saves come faster than the debounce, and stay under what one formation takes (a full batch would be sent
    # at once): only max_wait can start a formation before the stream ends.
    most = 45
    assert 2 * most < client.settings.formation.max_messages
    for turn in range(most):
        if formation_requests(fake_anthropic):
            break
        memory.save({"input": f"I have read book number {turn}"}, {"output": "nice"})
        time.sleep(0.1)  # the stream's pace, not a wait for the worker
    else:
        pytest.fail(f"no formation while {most} exchanges streamed for longer than max_wait")
    for more in range(turn, turn + 5):
        memory.save({"input": f"I have read book number {more}"}, {"output": "nice"})
    entries = session.history.entries()
    wait_until_formed(raw_redis, client, namespace, entries)

    assert formed_ids(raw_redis, client, namespace) == Counter(e.id for e in entries)  # each in one operation
    assert len(ran_operations(raw_redis, client, namespace)) >= 2
    assert fact_sources(client, namespace) == Counter(user_ids(entries))


def test_a_save_that_raced_another_reads_the_state_again(
    client: MemoryClient, namespace: str, fake_anthropic: FakeAnthropic, raw_redis: redis.Redis
):
    session = client.session(namespace, "chat-6", key=KEY, promote="none", form_into="facts", debounce=2, max_wait=30)
    session.add_messages(_exchange("I have a dog"))
    # One save appends and reads the state, then another save (another process) runs whole before it claims.
    first = session.ops.add_messages(_exchange("I have a cat"))
    step = next(first)
    while not _claims(step):
        step = first.send(client._perform(step))
    session.add_messages(_exchange("I have a parrot"))
    finish(first, step, client._perform)
    entries = session.history.entries()
    wait_until_formed(raw_redis, client, namespace, entries)

    assert formed_ids(raw_redis, client, namespace) == Counter(e.id for e in entries)
    assert len(ran_operations(raw_redis, client, namespace)) == 1
    assert len(formation_requests(fake_anthropic)) == 1


def test_sessions_of_several_processes_form_each_message_once(
    client: MemoryClient, namespace: str, fake_anthropic: FakeAnthropic, raw_redis: redis.Redis
):
    # Two clients with their own connections stand for two app processes saving into one session.
    with MemoryClient(client.settings) as other:
        handles = [
            c.session(namespace, "chat-3", key=KEY, promote="none", form_into="facts", debounce=0.3, max_wait=1.0)
            for c in (client, other)
        ]
        failures: list[Exception] = []

        def talk(index: int) -> None:
            try:
                memory = handles[index].buffer()
                for turn in range(12):
                    memory.save({"input": f"Process {index} says fact {turn}"}, {"output": "noted"})
            except Exception as exc:  # noqa: BLE001  # handed to the test thread
                failures.append(exc)

        threads = [threading.Thread(target=talk, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not failures
        entries = handles[0].history.entries()
        assert len(entries) == 48
        wait_until_formed(raw_redis, client, namespace, entries)

    assert formed_ids(raw_redis, client, namespace) == Counter(e.id for e in entries)
    assert fact_sources(client, namespace) == Counter(user_ids(entries))


def test_the_async_session_feeds_formation_the_same_way(
    client: MemoryClient, namespace: str, fake_anthropic: FakeAnthropic, raw_redis: redis.Redis
):
    async def burst() -> list[SessionMessage]:
        async with AsyncMemoryClient(client.settings) as aclient:
            session = aclient.session(
                namespace, "chat-4", key=KEY, promote="none", form_into="facts", debounce=0.3, max_wait=30
            )
            assert (session.form_into, session.debounce, session.max_wait) == ("facts", 0.3, 30.0)
            for fruit in ("apples", "pears", "plums", "figs", "kiwis"):
                await session.add_messages(
                    [
                        ChatMessage(role=MessageRole.USER, content=f"I grow {fruit}"),
                        ChatMessage(role=MessageRole.ASSISTANT, content="how nice"),
                    ]
                )
            return await session.entries()

    entries = asyncio.run(burst())
    wait_until_formed(raw_redis, client, namespace, entries)

    assert len(formation_requests(fake_anthropic)) == 1
    assert len(ran_operations(raw_redis, client, namespace)) == 1
    assert fact_sources(client, namespace) == Counter(user_ids(entries))


def test_a_formation_its_sender_never_published_is_taken_over_by_the_next_save(
    client: MemoryClient, namespace: str, fake_anthropic: FakeAnthropic, raw_redis: redis.Redis
):
    session = client.session(namespace, "chat-7", key=KEY, promote="none", form_into="facts", debounce=0.3, max_wait=30)
    dying = session.ops.add_messages(_exchange("I have a horse"))
    step = next(dying)
    while not _claims(step):
        step = dying.send(client._perform(step))
    dying.send(client._perform(step))  # the claim is made; the process dies before publishing its formation
    dying.close()
    state = client.keys.session(namespace, KEY, "chat-7", "formation")

    def due_passed() -> bool:
        seconds, micros = raw_redis.time()
        return float(raw_redis.hget(state, "due") or 0) < seconds + micros / 1e6

    wait_for(due_passed)
    session.add_messages(_exchange("I have a goat"))
    entries = session.history.entries()
    wait_until_formed(raw_redis, client, namespace, entries)

    assert formed_ids(raw_redis, client, namespace) == Counter(e.id for e in entries)
    assert len(ran_operations(raw_redis, client, namespace)) == 1
    assert fact_sources(client, namespace) == Counter(user_ids(entries))


def _claims(step: Any) -> bool:
    """Whether ``step`` is the feed's compare-and-set of the session's formation state."""
    return isinstance(step, Command) and isinstance(step.call, partial) and step.call.args[0] == _CLAIM


def finish(operation: Any, step: Any, perform: Any) -> Any:
    """Drives ``operation`` on from ``step`` (yielded, not yet performed) to its end."""
    try:
        while True:
            step = operation.send(perform(step))
    except StopIteration as done:
        return done.value


def _exchange(said: str) -> list[ChatMessage]:
    return [ChatMessage(role=MessageRole.USER, content=said), ChatMessage(role=MessageRole.ASSISTANT, content="ok")]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"form_into": "facts", "debounce": 0}, "debounce"),
        ({"form_into": "facts", "debounce": True}, "debounce"),
        ({"form_into": "facts", "max_wait": float("nan")}, "max_wait"),
        ({"form_into": "facts", "debounce": 10, "max_wait": 5}, "max_wait"),
        ({"form_into": "no:colons"}, "form_into"),
        ({"form_into": "chat", "set_name": "chat"}, "form_into 'chat' is the set this session's messages are promoted"),
    ],
)
def test_both_sessions_refuse_bad_formation_options(
    client: MemoryClient, namespace: str, options: dict[str, Any], named: str
):
    with pytest.raises(InvalidRequestError, match=named):
        client.session(namespace, "chat-5", **options)

    async def open_async() -> None:
        async with AsyncMemoryClient(client.settings) as aclient:
            aclient.session(namespace, "chat-5", **options)

    with pytest.raises(InvalidRequestError, match=named):
        asyncio.run(open_async())
