"""Group commit of adds: who shares a message, in what order, and what a failed publish does."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime

import pytest

from memory_core.client.coalescing import AddCoalescer, AsyncAddCoalescer, Sent
from memory_core.core.errors import BrokerUnavailable
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
    """Records what is published; each publish yields to the loop once, as a Redis round trip does."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.published: list[AddRequest] = []
        self.fail_after = fail_after

    async def publish(self, request: AddRequest) -> str:
        await asyncio.sleep(0)
        if self.fail_after is not None and len(self.published) >= self.fail_after:
            raise BrokerUnavailable("broker gone")
        self.published.append(request)
        return f"task-{len(self.published)}"


def test_async_adds_that_arrive_during_a_publish_share_the_next_message() -> None:
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
    # The first goes alone at once; the three that queued behind it go per set, in arrival order.
    assert [[item.id for item in r.items] for r in broker.published] == [["a"], ["b", "c", "e"], ["d"]]
    assert sent == [
        Sent("task-1", 0, False),
        Sent("task-2", 0, True),
        Sent("task-3", 0, False),
        Sent("task-2", 2, True),
    ]


def test_an_async_publish_error_reaches_every_caller_of_its_message() -> None:
    broker = AsyncBroker(fail_after=1)

    async def scenario() -> list[Sent | BaseException]:
        coalescer = AsyncAddCoalescer(broker.publish, max_items=64)
        calls = [coalescer.send(request("s", i)) for i in ("a", "b", "c")]
        return await asyncio.gather(*calls, return_exceptions=True)

    first, *rest = asyncio.run(scenario())
    assert first == Sent("task-1", 0, False)
    assert all(isinstance(outcome, BrokerUnavailable) for outcome in rest)


def test_after_a_shared_async_message_the_next_publish_lingers_for_as_many_callers() -> None:
    broker = AsyncBroker()

    async def scenario() -> None:
        coalescer = AsyncAddCoalescer(broker.publish, max_items=64, linger=0.5)
        await asyncio.gather(*(coalescer.send(request("s", i)) for i in ("a", "b", "c")))  # a alone, then b+c

        async def later(item: str) -> Sent:
            await asyncio.sleep(0.01)  # released callers come back one by one
            return await coalescer.send(request("s", item))

        await asyncio.gather(coalescer.send(request("s", "d")), later("e"))

    asyncio.run(scenario())
    assert [[item.id for item in r.items] for r in broker.published] == [["a"], ["b", "c"], ["d", "e"]]
