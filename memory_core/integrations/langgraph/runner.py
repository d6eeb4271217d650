"""One logic for a blocking and an async method: it yields calls on memory-core handles, a runner performs them."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Callable, Generator, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

from memory_core.core import steps
from memory_core.core.errors import ConfigurationError, MemorySetNotFound

T = TypeVar("T")


# -- running one logic blocking or awaited ---------------------------------------------------------------------

RAISE: Any = object()


class Call(NamedTuple):
    """``method`` of the long-term handle of ``key`` (of the saver's tier: None); ``missing``, when given, is
    its result if the memory set does not exist (instead of ``MemorySetNotFound``)."""

    key: str | None
    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = MappingProxyType({})
    missing: Any = RAISE


# A logic yields calls (a list of them runs concurrently when awaited) and gets their results back, or the
# memory-core error a call raised; the same logic serves the blocking and the async methods.
Logic = Generator[Call | builtins.list[Call], Any, T]


class Runner:
    """Performs a logic on handles of a ``MemoryClient`` (blocking) or of an ``AsyncMemoryClient`` (awaited)."""

    def __init__(
        self, owner: str, blocking: Callable[[str | None], Any] | None, awaited: Callable[[str | None], Any] | None
    ) -> None:
        if blocking is None and awaited is None:
            raise ConfigurationError(f"{owner} needs client= (a MemoryClient), aclient= (an AsyncMemoryClient) or both")
        self._owner, self._blocking, self._awaited = owner, blocking, awaited

    def run(self, logic: Logic[T]) -> T:
        if self._blocking is None:
            raise ConfigurationError(f"this {self._owner} has no client=: pass a MemoryClient for the blocking methods")
        handle = self._blocking

        def one(call: Call) -> Any:
            try:
                return getattr(handle(call.key), call.method)(*call.args, **call.kwargs)
            except MemorySetNotFound:
                if call.missing is RAISE:
                    raise
                return call.missing

        def perform(step: Call | builtins.list[Call]) -> Any:
            calls = step if isinstance(step, builtins.list) else [step]
            results = [one(c) for c in calls]
            return results if calls is step else results[0]

        return steps.run(logic, perform)

    async def arun(self, logic: Logic[T]) -> T:
        if self._awaited is None:
            raise ConfigurationError(f"this {self._owner} has no aclient=: pass an AsyncMemoryClient for async methods")
        handle = self._awaited

        async def one(call: Call) -> Any:
            try:
                return await getattr(handle(call.key), call.method)(*call.args, **call.kwargs)
            except MemorySetNotFound:
                if call.missing is RAISE:
                    raise
                return call.missing

        async def perform(step: Call | builtins.list[Call]) -> Any:
            calls = step if isinstance(step, builtins.list) else [step]
            results = builtins.list(await asyncio.gather(*map(one, calls)))
            return results if calls is step else results[0]

        return await steps.run_async(logic, perform)
