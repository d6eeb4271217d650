"""One implementation of each client operation for both clients, blocking and asyncio.

An operation is a generator: it validates, builds requests and reads replies itself, and
*yields* each piece of I/O it needs as a step (a Redis command, a pipeline, a task call, a
pause). A driver performs the step with its own connections, blocking (``MemoryClient``) or
awaiting (``AsyncMemoryClient``), and sends the result back in, or throws the error in, so
the operation's own ``try``/``except`` handles it. The logic exists once; only the drivers
differ, and they know nothing of memory.

    def newest(order: str) -> Operation[bytes | None]:
        ids = yield Command(lambda r: r.zrevrange(order, 0, 0))
        return ids[0] if ids else None
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from memory_core.core.messages import AddRequest, NamespaceRequest
from memory_core.core.models import ChatMessage, MemorySet, MemorySetItem

T = TypeVar("T")
S = TypeVar("S")  # the steps an operation yields: ``Step`` here; other drivers may define their own


@dataclass(frozen=True, slots=True)
class Command:
    """One Redis command: ``call`` is given the client (``redis.Redis`` or ``redis.asyncio.Redis``)."""

    call: Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Commands sent together (in MULTI/EXEC when ``transaction``); the result is the list of replies."""

    calls: Sequence[Callable[[Any], Any]]
    transaction: bool = True


@dataclass(frozen=True, slots=True)
class Optimistic:
    """A read-modify-write of ``key``: read under WATCH, then ``writes(value)`` in MULTI/EXEC, all again if
    another client changed ``key`` in between."""

    key: str
    writes: Callable[[Any], Sequence[Callable[[Any], Any]]]


@dataclass(frozen=True, slots=True)
class Call:
    """A task: refuse at once if no worker consumes its queue, send it, wait for the reply (a dict)."""

    task: str
    request: NamespaceRequest
    summary: str
    timeout: float | None = None


@dataclass(frozen=True, slots=True)
class Send:
    """A task sent without waiting; the result is its id."""

    task: str
    request: NamespaceRequest
    summary: str


@dataclass(frozen=True, slots=True)
class SubmitAdd:
    """An add, perhaps sharing a message with concurrent adds to the set; the result is a ``Sent``."""

    request: AddRequest
    need_worker: bool


@dataclass(frozen=True, slots=True)
class Wait:
    """Waits for the reply of a task sent earlier; the result is the reply's dict."""

    namespace: str
    task_id: str
    task: str
    timeout: float | None = None
    shared: bool = False


@dataclass(frozen=True, slots=True)
class Sleep:
    """A pause of ``seconds``."""

    seconds: float


Step = Command | Pipeline | Optimistic | Call | Send | SubmitAdd | Wait | Sleep
Operation = Generator[Step, Any, T]


class LongTermSteps(Protocol):
    """The long-term operations of one key (``client.long_term.LongTermOperations``), as the tiers use them."""

    def get_or_create_memory_set(
        self, name: str, item_type: Any, capacity: Any, context_window: Any, **options: Any
    ) -> Operation[MemorySet]: ...

    def get_memory_set(self, name: str) -> Operation[MemorySet]: ...

    def add(
        self,
        memory_set: MemorySet | str,
        items: Sequence[str | ChatMessage],
        ids: Sequence[str] | None,
        metadatas: Sequence[dict[str, Any]] | None,
        lifecycle: dict[str, Any],
        *,
        wait: bool,
    ) -> Operation[list[str]]: ...

    def get(self, memory_set: MemorySet | str, ids: Sequence[str] | None) -> Operation[list[MemorySetItem]]: ...

    def delete(self, memory_set: MemorySet | str, ids: Sequence[str] | None) -> Operation[int]: ...


def run(operation: Generator[S, Any, T], perform: Callable[[S], Any]) -> T:
    """Drives ``operation`` to its end, performing each step with ``perform`` (which blocks)."""
    outcome: tuple[bool, Any] = (True, None)
    while True:
        try:
            step = operation.send(outcome[1]) if outcome[0] else operation.throw(outcome[1])
        except StopIteration as done:
            result: T = done.value
            return result
        try:
            outcome = (True, perform(step))
        except Exception as exc:  # noqa: BLE001  # handed to the operation, whose own except clauses decide
            outcome = (False, exc)


async def run_async(operation: Generator[S, Any, T], perform: Callable[[S], Awaitable[Any]]) -> T:
    """Drives ``operation`` to its end on the running loop, awaiting each step's ``perform``."""
    value: Any = None
    error: Exception | None = None
    while True:
        try:
            step = operation.send(value) if error is None else operation.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        value, error = None, None
        try:
            value = await perform(step)
        except Exception as exc:  # noqa: BLE001  # as in run()
            error = exc


def on_redis(client: Any) -> Callable[[Step], Any]:
    """Performs Redis steps and pauses with a blocking ``redis.Redis``."""

    def perform(step: Step) -> Any:
        if isinstance(step, Command):
            return step.call(client)
        if isinstance(step, Pipeline):
            with client.pipeline(transaction=step.transaction) as pipe:
                for call in step.calls:
                    call(pipe)
                return pipe.execute()
        if isinstance(step, Optimistic):

            def attempt(pipe: Any) -> None:
                writes = step.writes(pipe.get(step.key))
                pipe.multi()
                for call in writes:
                    call(pipe)

            return client.transaction(attempt, step.key)
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            return None
        raise TypeError(f"{type(step).__name__} needs a client, not only Redis")

    return perform


def on_redis_async(client: Any) -> Callable[[Step], Awaitable[Any]]:
    """Performs Redis steps and pauses with a ``redis.asyncio.Redis``, on the running loop."""

    async def perform(step: Step) -> Any:
        if isinstance(step, Command):
            return await step.call(client)
        if isinstance(step, Pipeline):
            # Commands queue synchronously on an asyncio pipeline; only execute() does I/O.
            async with client.pipeline(transaction=step.transaction) as pipe:
                for call in step.calls:
                    call(pipe)
                return await pipe.execute()
        if isinstance(step, Optimistic):

            async def attempt(pipe: Any) -> None:
                writes = step.writes(await pipe.get(step.key))
                pipe.multi()
                for call in writes:
                    call(pipe)

            return await client.transaction(attempt, step.key)
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        raise TypeError(f"{type(step).__name__} needs a client, not only Redis")

    return perform


def scan(pattern: str, count: int = 1000) -> Operation[list[Any]]:
    """Every key matching ``pattern``, found with SCAN in batches of about ``count``."""
    found: list[Any] = []
    cursor = 0
    while True:
        cursor, batch = yield _scan_from(cursor, pattern, count)
        found += batch
        if not cursor:
            return found


def _scan_from(cursor: int, pattern: str, count: int) -> Command:
    return Command(lambda r: r.scan(cursor, match=pattern, count=count))


def command(call: Callable[[Any], Any]) -> Operation[Any]:
    """An operation of one Redis command (to compose with ``yield from``)."""
    result = yield Command(call)
    return result
