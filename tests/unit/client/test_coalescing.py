"""Group commit of adds: who shares a message, in what order, and what a failed publish does."""

from __future__ import annotations

import asyncio
import gc
import random
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest

from memory_core.client.coalescing import AddCoalescer, AsyncAddCoalescer, Sent
from memory_core.core.errors import BrokerUnavailable, MemoryCoreError
from memory_core.core.messages import AddRequest, NewItem


def request(set_name: str, *ids: str) -> AddRequest:
    now = datetime.now(UTC)
    items = [NewItem(id=i, value=f"text {i}", created_time=now, seq=n) for n, i in enumerate(ids)]
    return AddRequest(namespace="ns", key="k", set_name=set_name, items=items)


class Broker:
    """Records what is published; the first publish blocks until released, so others queue up behind it."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.published: list[AddRequest] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail = fail

    def publish(self, request: AddRequest) -> str:
        if not self.published and not self.entered.is_set():
            self.entered.set()
            self.release.wait(5)
        if self.fail is not None and len(self.published) >= 1:
            raise self.fail
        self.published.append(request)
        return f"task-{len(self.published)}"


def queue_behind_first(
    coalescer: AddCoalescer, broker: Broker, first: AddRequest, *rest: AddRequest
) -> list[Future[Sent]]:
    """Sends ``first`` (which blocks in publish), then ``rest`` from other threads, then releases the broker."""
    pool = ThreadPoolExecutor(len(rest) + 1)
    futures = [pool.submit(coalescer.send, first)]
    assert broker.entered.wait(5)
    for r in rest:
        futures.append(pool.submit(coalescer.send, r))
        time.sleep(0.02)  # arrival order is the order they were submitted
    deadline = time.monotonic() + 5
    while len(coalescer._queue) < len(rest) and time.monotonic() < deadline:
        time.sleep(0.005)
    broker.release.set()
    pool.shutdown(wait=True)
    return futures


def test_a_lone_add_is_published_at_once_and_alone():
    broker = Broker()
    broker.entered.set()  # no blocking
    coalescer = AddCoalescer(broker.publish, max_items=64)
    assert coalescer.send(request("s", "a", "b")) == Sent("task-1", 0, False)
    assert [len(r.items) for r in broker.published] == [2]


def test_adds_that_queue_behind_a_publish_share_one_message_in_arrival_order():
    broker = Broker()
    coalescer = AddCoalescer(broker.publish, max_items=64)
    futures = queue_behind_first(
        coalescer, broker, request("s", "a"), request("s", "b", "c"), request("s", "d"), request("t", "e")
    )
    sent = [f.result() for f in futures]
    assert sent == [
        Sent("task-1", 0, False),
        Sent("task-2", 0, True),
        Sent("task-2", 2, True),
        Sent("task-3", 0, False),
    ]
    assert [[i.id for i in r.items] for r in broker.published] == [["a"], ["b", "c", "d"], ["e"]]
    assert [r.set_name for r in broker.published] == ["s", "s", "t"]
    assert coalescer.messages == 3
    assert coalescer.requests == 4


def test_a_merged_message_stays_within_max_items_and_never_repeats_an_id():
    broker = Broker()
    coalescer = AddCoalescer(broker.publish, max_items=3)
    queue_behind_first(
        coalescer,
        broker,
        request("s", "x"),
        request("s", "a", "b"),
        request("s", "c"),
        request("s", "d"),  # would make 4 items: next message
        request("s", "d"),  # repeats an id of the open message: next one
    )
    assert [[i.id for i in r.items] for r in broker.published] == [["x"], ["a", "b", "c"], ["d"], ["d"]]


def test_a_failed_publish_fails_every_add_it_carried_and_the_next_add_still_works():
    broker = Broker(fail=BrokerUnavailable("cannot publish memory.add to the broker at redis://x"))
    coalescer = AddCoalescer(broker.publish, max_items=64)
    futures = queue_behind_first(coalescer, broker, request("s", "a"), request("s", "b"), request("s", "c"))
    assert futures[0].result() == Sent("task-1", 0, False)
    for future in futures[1:]:
        with pytest.raises(BrokerUnavailable, match="cannot publish"):
            future.result()
    broker.fail = None
    assert coalescer.send(request("s", "d")).task_id == "task-2"
    assert coalescer._leading is False


def _busy_round(coalescer: AddCoalescer, broker: Broker) -> None:
    """A round in which two adds queued behind a publish and shared the next message."""
    queue_behind_first(coalescer, broker, request("s", "a"), request("s", "b"), request("s", "c"))
    assert [[i.id for i in r.items] for r in broker.published] == [["a"], ["b", "c"]]


def test_after_a_shared_message_the_next_publish_lingers_for_the_callers_it_released():
    broker = Broker()
    coalescer = AddCoalescer(broker.publish, max_items=64, linger=5.0)
    _busy_round(coalescer, broker)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(coalescer.send, request("s", "d"))
        time.sleep(0.1)  # without the linger, d would be published alone by now
        second = pool.submit(coalescer.send, request("s", "e"))
        assert first.result(timeout=5) == Sent("task-3", 0, True)
        assert second.result(timeout=5) == Sent("task-3", 1, True)
    assert [[i.id for i in r.items] for r in broker.published][-1] == ["d", "e"]


def test_the_linger_is_bounded_and_a_lone_caller_stops_paying_it():
    broker = Broker()
    coalescer = AddCoalescer(broker.publish, max_items=64, linger=1.0)
    _busy_round(coalescer, broker)
    started = time.monotonic()
    assert coalescer.send(request("s", "d")) == Sent("task-3", 0, False)  # waited for a second caller: none came
    lingered = time.monotonic() - started
    started = time.monotonic()
    assert coalescer.send(request("s", "e")) == Sent("task-4", 0, False)
    alone = time.monotonic() - started
    assert 0.9 < lingered < 5.0
    assert alone < 0.5  # the previous round carried one add: nothing to wait for


def test_without_a_linger_the_next_caller_publishes_at_once():
    broker = Broker()
    coalescer = AddCoalescer(broker.publish, max_items=64, linger=0.0)
    _busy_round(coalescer, broker)
    started = time.monotonic()
    coalescer.send(request("s", "d"))
    assert time.monotonic() - started < 0.5


class AsyncBroker:
    """Records what is published; each publish yields to the loop once, as a Redis round trip does.

    ``hold_first``: the first publish waits for ``release``, so that others queue up behind it.
    """

    def __init__(self, fail_after: int | None = None, *, hold_first: bool = False) -> None:
        self.published: list[AddRequest] = []
        self.fail_after = fail_after
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        if not hold_first:
            self.release.set()

    async def publish(self, request: AddRequest) -> str:
        if not self.entered.is_set():
            self.entered.set()
            await self.release.wait()
        await asyncio.sleep(0)
        if self.fail_after is not None and len(self.published) >= self.fail_after:
            raise BrokerUnavailable("broker gone")
        self.published.append(request)
        return f"task-{len(self.published)}"


def test_async_adds_started_in_one_turn_of_the_loop_share_the_first_message() -> None:
    broker = AsyncBroker()

    async def scenario() -> list[Sent]:
        coalescer = AsyncAddCoalescer(broker.publish, max_items=64)
        return await asyncio.gather(  # type: ignore[return-value]  # a tuple at type level, a list at run time
            coalescer.send(request("s", "a")),
            coalescer.send(request("s", "b", "c")),
            coalescer.send(request("t", "d")),
            coalescer.send(request("s", "e")),
        )

    sent = list(asyncio.run(scenario()))
    # Per set, in arrival order.
    assert [[item.id for item in r.items] for r in broker.published] == [["a", "b", "c", "e"], ["d"]]
    assert sent == [
        Sent("task-1", 0, True),
        Sent("task-1", 1, True),
        Sent("task-2", 0, False),
        Sent("task-1", 3, True),
    ]


def test_async_adds_that_arrive_during_a_publish_share_the_next_message() -> None:
    broker = AsyncBroker(hold_first=True)

    async def scenario() -> list[Sent]:
        coalescer = AsyncAddCoalescer(broker.publish, max_items=64)
        first = asyncio.create_task(coalescer.send(request("s", "a")))
        await broker.entered.wait()
        rest = [asyncio.create_task(coalescer.send(r)) for r in (request("s", "b", "c"), request("t", "d"))]
        rest.append(asyncio.create_task(coalescer.send(request("s", "e"))))
        await asyncio.sleep(0)
        broker.release.set()
        return [await task for task in (first, *rest)]

    sent = asyncio.run(scenario())
    assert [[item.id for item in r.items] for r in broker.published] == [["a"], ["b", "c", "e"], ["d"]]
    assert sent == [
        Sent("task-1", 0, False),
        Sent("task-2", 0, True),
        Sent("task-3", 0, False),
        Sent("task-2", 2, True),
    ]


def test_an_async_publish_error_reaches_every_caller_of_its_message() -> None:
    broker = AsyncBroker(fail_after=1, hold_first=True)

    async def scenario() -> list[Sent | BaseException]:
        coalescer = AsyncAddCoalescer(broker.publish, max_items=64)
        calls = [asyncio.create_task(coalescer.send(request("s", "a")))]
        await broker.entered.wait()
        calls += [asyncio.create_task(coalescer.send(request("s", i))) for i in ("b", "c")]
        await asyncio.sleep(0)
        broker.release.set()
        return await asyncio.gather(*calls, return_exceptions=True)

    first, *rest = asyncio.run(scenario())
    assert first == Sent("task-1", 0, False)
    assert all(isinstance(outcome, BrokerUnavailable) for outcome in rest)


def test_after_a_shared_async_message_the_next_publish_lingers_for_as_many_callers() -> None:
    broker = AsyncBroker()

    async def scenario() -> None:
        coalescer = AsyncAddCoalescer(broker.publish, max_items=64, linger=0.5)
        await asyncio.gather(*(coalescer.send(request("s", i)) for i in ("a", "b", "c")))  # started in one turn

        async def later(item: str) -> Sent:
            await asyncio.sleep(0.01)  # released callers come back one by one
            return await coalescer.send(request("s", item))

        await asyncio.gather(coalescer.send(request("s", "d")), later("e"))

    asyncio.run(scenario())
    assert [[item.id for item in r.items] for r in broker.published] == [["a", "b", "c"], ["d", "e"]]


# A call that ends early ends only itself.


class Interrupted(BaseException):
    """What a signal handler or a thread-interrupting timeout raises into a caller's thread."""


class InterruptingBroker(Broker):
    """The first publish blocks until released; the second is interrupted in the publishing thread."""

    def publish(self, request: AddRequest) -> str:
        if len(self.published) == 1 and self.fail is None:
            self.fail = Interrupted()
            raise self.fail
        if not self.published and not self.entered.is_set():
            self.entered.set()
            self.release.wait(5)
        self.published.append(request)
        return f"task-{len(self.published)}"


def _wait_for_queue(coalescer: AddCoalescer, length: int) -> None:
    deadline = time.monotonic() + 5
    while len(coalescer._queue) < length and time.monotonic() < deadline:
        time.sleep(0.005)
    assert len(coalescer._queue) == length


def test_a_leader_interrupted_mid_publish_strands_none_of_the_adds_queued_with_it():
    broker = InterruptingBroker()
    coalescer = AddCoalescer(broker.publish, max_items=64)
    pool = ThreadPoolExecutor(4)
    first = pool.submit(coalescer.send, request("s", "a"))
    assert broker.entered.wait(5)
    leader = pool.submit(coalescer.send, request("s", "b"))
    _wait_for_queue(coalescer, 1)
    shared = pool.submit(coalescer.send, request("s", "c"))
    _wait_for_queue(coalescer, 2)
    later = pool.submit(coalescer.send, request("t", "d"))  # the same round, the next message
    _wait_for_queue(coalescer, 3)
    broker.release.set()
    try:
        assert first.result(timeout=5) == Sent("task-1", 0, False)
        with pytest.raises(Interrupted):
            leader.result(timeout=5)
        # The message b and c shared may or may not be queued: c is told so, typed.
        with pytest.raises(MemoryCoreError, match="interrupted"):
            shared.result(timeout=5)
        assert later.result(timeout=5) == Sent("task-2", 0, False)
        assert coalescer.send(request("s", "e")) == Sent("task-3", 0, False)
    finally:
        broker.release.set()
        pool.shutdown(wait=False, cancel_futures=True)
    assert coalescer._leading is False
    assert coalescer._queue == []


def test_a_caller_interrupted_while_queued_is_dropped_and_the_next_caller_leads():
    # The caller is this (main) thread, interrupted by a signal handler raising a timeout, as
    # an alarm-based deadline does.
    broker = Broker()
    coalescer = AddCoalescer(broker.publish, max_items=64)
    pool = ThreadPoolExecutor(2)
    main = threading.main_thread().ident
    assert main is not None
    assert threading.get_ident() == main

    def on_signal(signum: int, frame: object) -> None:
        raise TimeoutError("the caller's deadline passed")

    def interrupt_main_once_two_wait() -> Future[Sent]:
        _wait_for_queue(coalescer, 1)  # this thread's add is queued behind the publish of a
        after = pool.submit(coalescer.send, request("s", "c"))
        _wait_for_queue(coalescer, 2)
        signal.pthread_kill(main, signal.SIGUSR1)
        return after

    previous = signal.signal(signal.SIGUSR1, on_signal)
    first = pool.submit(coalescer.send, request("s", "a"))
    try:
        assert broker.entered.wait(5)
        with ThreadPoolExecutor(1) as helper:
            interrupter = helper.submit(interrupt_main_once_two_wait)
            with pytest.raises(TimeoutError, match="deadline"):
                coalescer.send(request("s", "b"))
            after = interrupter.result(timeout=5)
        broker.release.set()
        assert first.result(timeout=5) == Sent("task-1", 0, False)
        assert after.result(timeout=5) == Sent("task-2", 0, False)  # led its own round: b's caller is gone
    finally:
        signal.signal(signal.SIGUSR1, previous)
        broker.release.set()
        pool.shutdown(wait=False, cancel_futures=True)
    assert [[i.id for i in r.items] for r in broker.published] == [["a"], ["c"]]
    assert coalescer._leading is False


async def _queue_behind_a_held_publish(
    coalescer: AsyncAddCoalescer, broker: AsyncBroker, first: AddRequest, *rest: AddRequest
) -> list[asyncio.Task[Sent]]:
    tasks = [asyncio.create_task(coalescer.send(first))]
    await broker.entered.wait()
    tasks += [asyncio.create_task(coalescer.send(r)) for r in rest]
    await asyncio.sleep(0)  # they are queued
    return tasks


def test_cancelling_a_queued_async_add_drops_it_and_the_others_still_get_their_message() -> None:
    broker = AsyncBroker(hold_first=True)

    async def scenario() -> list[Sent | BaseException]:
        coalescer = AsyncAddCoalescer(broker.publish, max_items=64)
        first, dropped, kept = await _queue_behind_a_held_publish(
            coalescer, broker, request("s", "a"), request("s", "b"), request("s", "c")
        )
        dropped.cancel()
        await asyncio.sleep(0)
        broker.release.set()
        done = [asyncio.wait_for(task, 5) for task in (first, dropped, kept)]
        outcomes = await asyncio.gather(*done, return_exceptions=True)
        assert await coalescer.send(request("s", "d")) == Sent("task-3", 0, False)
        return outcomes

    first, dropped, kept = asyncio.run(scenario())
    assert first == Sent("task-1", 0, False)
    assert isinstance(dropped, asyncio.CancelledError)
    assert kept == Sent("task-2", 0, False)
    assert [[item.id for item in r.items] for r in broker.published] == [["a"], ["c"], ["d"]]


def test_cancelling_the_caller_whose_publish_is_in_flight_leaves_the_others_their_message() -> None:
    broker = AsyncBroker(hold_first=True)

    async def scenario() -> list[Sent | BaseException]:
        coalescer = AsyncAddCoalescer(broker.publish, max_items=64)
        tasks = await _queue_behind_a_held_publish(
            coalescer, broker, request("s", "a"), request("s", "b"), request("s", "c")
        )
        tasks[0].cancel()  # its add is being published: the publish goes on
        await asyncio.sleep(0)
        broker.release.set()
        return await asyncio.gather(*(asyncio.wait_for(task, 5) for task in tasks), return_exceptions=True)

    cancelled, *others = asyncio.run(scenario())
    assert isinstance(cancelled, asyncio.CancelledError)
    assert others == [Sent("task-2", 0, True), Sent("task-2", 1, True)]
    assert [[item.id for item in r.items] for r in broker.published] == [["a"], ["b", "c"]]


def test_when_the_publishing_task_is_cancelled_every_waiting_add_gets_a_typed_error() -> None:
    broker = AsyncBroker(hold_first=True)

    async def scenario() -> list[Sent | BaseException]:
        coalescer = AsyncAddCoalescer(broker.publish, max_items=64)
        tasks = await _queue_behind_a_held_publish(coalescer, broker, request("s", "a"), request("s", "b"))
        assert coalescer._publishing is not None
        coalescer._publishing.cancel()  # as the loop's shutdown does
        outcomes = await asyncio.gather(*(asyncio.wait_for(task, 5) for task in tasks), return_exceptions=True)
        broker.release.set()
        outcomes.append(await coalescer.send(request("s", "c")))
        return outcomes

    in_flight, queued, after = asyncio.run(scenario())
    for outcome in (in_flight, queued):
        assert isinstance(outcome, MemoryCoreError)
        assert "may or may not be queued" in str(outcome)
    assert isinstance(after, Sent)


class RandomBroker:
    """A publish takes a random moment, and one in ten fails as an unreachable broker does."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.failing = 0.1
        self.published: list[AddRequest] = []

    async def publish(self, request: AddRequest) -> str:
        await asyncio.sleep(self.rng.random() * 0.002)
        if self.rng.random() < self.failing:
            raise BrokerUnavailable("broker gone")
        self.published.append(request)
        return f"task-{len(self.published)}"


@pytest.mark.parametrize("seed", range(5))
def test_random_cancellations_leave_every_other_async_add_its_own_outcome(seed: int) -> None:
    rng = random.Random(seed)
    broker = RandomBroker(rng)

    unreported: list[dict[str, Any]] = []  # what the loop would log, e.g. an outcome nobody retrieved

    async def scenario() -> list[Sent | type[BaseException]]:
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: unreported.append(context))
        coalescer = AsyncAddCoalescer(broker.publish, max_items=8, linger=0.001)

        async def add(n: int) -> Sent:
            await asyncio.sleep(rng.random() * 0.01)
            return await coalescer.send(request(rng.choice("st"), f"id-{n}"))

        tasks = [asyncio.create_task(add(n)) for n in range(300)]
        for task in rng.sample(tasks, 100):
            await asyncio.sleep(rng.random() * 0.0005)
            task.cancel()
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 20)
        broker.failing = 0.0
        assert isinstance(await coalescer.send(request("s", "after")), Sent)
        assert coalescer._queue == []
        kinds = [outcome if isinstance(outcome, Sent) else type(outcome) for outcome in outcomes]
        del tasks, outcomes  # the exceptions' frames hold the callers' futures
        gc.collect()
        return kinds

    outcomes = asyncio.run(scenario())
    assert unreported == []
    for n, outcome in enumerate(outcomes):
        assert isinstance(outcome, Sent) or outcome in (BrokerUnavailable, asyncio.CancelledError), repr(outcome)
        if isinstance(outcome, Sent):
            message = broker.published[int(outcome.task_id.removeprefix("task-")) - 1]
            assert message.items[outcome.offset].id == f"id-{n}"
    assert sum(isinstance(o, Sent) for o in outcomes) > 100
