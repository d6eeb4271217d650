"""Cancelling a call of ``AsyncMemoryClient`` ends that call only, against a real worker and Redis.

Hundreds of concurrent adds (which share broker messages and reply reads) and searches, some cancelled at
random moments and some bounded by tiny ``asyncio.wait_for`` timeouts: every other caller gets its answer or
a typed ``MemoryCoreError``, no ``InvalidStateError`` reaches anyone, every acknowledged add is stored, and
the client keeps working; also while Redis is paused, and after.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest
import redis
from celery import Celery

from memory_core import AsyncMemoryClient
from memory_core.core.errors import MemoryCoreError, ReplyTimeout
from memory_core.core.messages import Reply
from memory_core.core.settings import Settings

SET = "facts"


class Burst:
    """Calls started at once; some cancelled at random, some bounded by a tiny timeout, the rest left alone."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.tasks: list[asyncio.Task[Any]] = []
        self.cancelled: set[int] = set()
        self.bounded: set[int] = set()
        self.add_ids: dict[int, str] = {}

    def start(self, call: Callable[[], Awaitable[Any]], *, add_id: str | None = None) -> None:
        n = len(self.tasks)
        bound = self.rng.choice([0.0005, 0.002, 0.01, 0.05, 0.2]) if self.rng.random() < 0.2 else None
        if bound is not None:
            self.bounded.add(n)
        self.tasks.append(asyncio.create_task(_after(self.rng.random() * 0.02, call, bound)))
        if add_id is not None:
            self.add_ids[n] = add_id

    async def cancel_some(self, share: float) -> None:
        for n in self.rng.sample(range(len(self.tasks)), int(len(self.tasks) * share)):
            await asyncio.sleep(self.rng.random() * 0.002)
            self.tasks[n].cancel()
            self.cancelled.add(n)

    async def outcomes(self) -> list[Any]:
        return await asyncio.wait_for(asyncio.gather(*self.tasks, return_exceptions=True), 120)

    def acknowledged(self, outcomes: list[Any]) -> list[str]:
        """Checks each outcome against what was done to its call; returns the ids of the adds that returned."""
        stored: list[str] = []
        for n, outcome in enumerate(outcomes):
            assert not isinstance(outcome, asyncio.InvalidStateError), f"call {n}: {outcome!r}"
            if isinstance(outcome, asyncio.CancelledError):
                assert n in self.cancelled, f"call {n} was cancelled, though nobody cancelled it"
            elif isinstance(outcome, TimeoutError):
                assert n in self.bounded, f"call {n}: an untyped timeout {outcome!r}"
            elif isinstance(outcome, BaseException):
                assert isinstance(outcome, MemoryCoreError), f"call {n}: untyped {outcome!r}"
            elif n in self.add_ids:
                assert outcome == [self.add_ids[n]]
                stored.append(self.add_ids[n])
            else:
                assert isinstance(outcome, list), f"call {n}: {outcome!r}"
        return stored


async def _after(delay: float, call: Callable[[], Awaitable[Any]], bound: float | None) -> Any:
    await asyncio.sleep(delay)  # the call is made after the delay: one cancelled before leaves no coroutine behind
    return await (call() if bound is None else asyncio.wait_for(call(), bound))


async def _start_burst(client: AsyncMemoryClient, namespace: str, rng: random.Random, tag: str) -> Burst:
    memory = client.long_term(namespace, "user-1")
    burst = Burst(rng)
    for i in range(200):
        item_id = f"{tag}-{i}"
        burst.start(functools.partial(memory.add, SET, [f"fact {i} of {tag}"], ids=[item_id]), add_id=item_id)
    for i in range(100):
        burst.start(functools.partial(memory.search, SET, f"fact {i}", limit=3))
    return burst


async def _still_works(client: AsyncMemoryClient, namespace: str, acknowledged: list[str]) -> None:
    memory = client.long_term(namespace, "user-1")
    assert await memory.add(SET, ["written after the burst"], ids=["after"]) == ["after"]
    assert [hit.id for hit in await memory.search(SET, "written after the burst", limit=1)] == ["after"]
    found = {item.id for item in await memory.get(SET, [*acknowledged, "after"])}
    assert found == {*acknowledged, "after"}, f"acknowledged adds not stored: {set(acknowledged) - found}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [1, 2])
def test_random_cancellations_end_only_the_cancelled_calls(
    settings: Settings, worker: Celery, namespace: str, seed: int
) -> None:
    async def scenario() -> None:
        async with AsyncMemoryClient(settings) as client:
            await client.long_term(namespace, "user-1").get_or_create_memory_set(SET, capacity=100_000, dedup="none")
            burst = await _start_burst(client, namespace, random.Random(seed), "burst")
            await burst.cancel_some(1 / 3)
            acknowledged = burst.acknowledged(await burst.outcomes())
            assert acknowledged, "no add got through"
            await _still_works(client, namespace, acknowledged)

    asyncio.run(scenario())


@pytest.mark.timeout(300)
def test_cancellations_while_redis_is_paused_end_only_the_cancelled_calls(
    settings: Settings, worker: Celery, namespace: str, raw_redis: redis.Redis
) -> None:
    async def scenario() -> None:
        async with AsyncMemoryClient(settings) as client:
            await client.long_term(namespace, "user-1").get_or_create_memory_set(SET, capacity=100_000, dedup="none")
            raw_redis.execute_command("CLIENT", "PAUSE", 1500, "ALL")  # every client's commands wait
            paused_until = time.monotonic() + 1.5
            burst = await _start_burst(client, namespace, random.Random(7), "paused")
            await burst.cancel_some(1 / 3)  # while the publishes and reply reads are stuck
            assert time.monotonic() < paused_until, "the cancellations came after the pause"
            acknowledged = burst.acknowledged(await burst.outcomes())
            assert acknowledged, "no add got through once Redis answered again"
            await _still_works(client, namespace, acknowledged)

    asyncio.run(scenario())


def test_a_shared_reply_read_serves_each_caller_within_its_own_timeout(
    settings: Settings, raw_redis: redis.Redis, namespace: str
) -> None:
    # Merged adds share one read of their task's reply: the caller that starts it must not impose its
    # timeout, its failure or its cancellation on the others.
    task_id = str(uuid.uuid4())
    reply = Reply(ok=True, result={"ids": ["a", "b"]}).model_dump_json()

    async def scenario() -> list[Any]:
        async with AsyncMemoryClient(settings) as client:
            key = client.keys.reply(namespace, task_id)

            def wait(timeout: float) -> Coroutine[Any, Any, dict[str, Any]]:
                return client.dispatcher.wait(namespace, task_id, timeout, shared=True)

            impatient = asyncio.create_task(wait(0.3))  # starts the read
            await asyncio.sleep(0.05)
            patient = asyncio.create_task(wait(10))
            cancelled = asyncio.create_task(asyncio.wait_for(wait(10), 0.1))
            outcomes = list(await asyncio.gather(impatient, cancelled, return_exceptions=True))
            raw_redis.rpush(key, reply)
            raw_redis.expire(key, 60)
            outcomes.append(await asyncio.wait_for(patient, 10))
            outcomes.append(await wait(5))  # a receipt waited on later reads it too
            return outcomes

    impatient, cancelled, patient, later = asyncio.run(scenario())
    assert isinstance(impatient, ReplyTimeout)
    assert "within 0.3s" in str(impatient)
    assert isinstance(cancelled, TimeoutError)
    assert patient == {"ids": ["a", "b"]}
    assert later == {"ids": ["a", "b"]}


def test_a_shared_reply_read_that_failed_is_read_again_by_the_next_caller(
    settings: Settings, raw_redis: redis.Redis, namespace: str
) -> None:
    task_id = str(uuid.uuid4())

    async def scenario() -> list[Any]:
        async with AsyncMemoryClient(settings) as client:
            outcomes: list[Any] = []
            try:
                await client.dispatcher.wait(namespace, task_id, 0.2, shared=True)
            except ReplyTimeout as exc:
                outcomes.append(exc)
            key = client.keys.reply(namespace, task_id)
            raw_redis.rpush(key, Reply(ok=True, result={"ids": ["a"]}).model_dump_json())
            outcomes.append(await client.dispatcher.wait(namespace, task_id, 5, shared=True))
            return outcomes

    timed_out, read_again = asyncio.run(scenario())
    assert isinstance(timed_out, ReplyTimeout)
    assert read_again == {"ids": ["a"]}
