"""``AsyncSession``: one conversation for asyncio code, the same operations as ``Session``, awaited.

It has the history calls (append, read, pop, clear), promotion into long-term memory, folds,
entities and ``finish``. The LangChain-style strategies (``buffer``, ``window``...) are the
blocking ``Session``'s; asyncio frameworks bring their own memory classes, which the adapters in
``memory_core.integrations`` build on this.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from memory_core.core.messages import EntitiesReport, FoldReport
from memory_core.core.models import ChatMessage, MemorySet
from memory_core.core.steps import Operation
from memory_core.tiers.session.history import SessionMessage, SummaryState
from memory_core.tiers.session.session import SessionHandle, SessionOperations

T = TypeVar("T")


class AsyncSession(SessionHandle):
    """One conversation of a key (user, agent) in a namespace; see ``Session`` for promotion."""

    def __init__(self, operations: SessionOperations, run: Callable[[Operation[Any]], Awaitable[Any]]) -> None:
        super().__init__(operations)
        self._run = run

    async def _do(self, operation: Operation[T]) -> T:
        result: T = await self._run(operation)
        return result

    async def add_messages(self, messages: Sequence[ChatMessage]) -> list[SessionMessage]:
        """Appends to the history and, unless ``promote`` says otherwise, enqueues their long-term copy."""
        return await self._do(self.ops.add_messages(messages))

    async def entries(self, *, after: str | None = None, last: int | None = None) -> list[SessionMessage]:
        """Messages oldest first: all, those after the cursor ``after``, or the ``last`` n."""
        return await self._do(self.ops.history.entries(after=after, last=last))

    async def messages(self) -> list[ChatMessage]:
        """All messages, oldest first."""
        return [entry.message for entry in await self.entries()]

    async def count(self) -> int:
        """How many messages the session holds."""
        return await self._do(self.ops.history.count())

    async def pop(self) -> SessionMessage | None:
        """Removes the newest message and returns it; None when empty. A long-term copy stays."""
        return await self._do(self.ops.history.pop())

    async def clear(self) -> None:
        """Removes the messages, the summary state and the entities of this session from Redis."""
        await self._do(self.ops.history.clear())

    async def summary_state(self) -> SummaryState:
        """The summary and how far it reaches, as the workers last wrote it."""
        return await self._do(self.ops.history.summary_state())

    async def entities(self) -> dict[str, str]:
        """Every entity of the session and its summary."""
        return await self._do(self.ops.entities())

    async def fold(
        self, max_tokens: int, *, model: str | None = None, wait: bool = True, **more: Any
    ) -> FoldReport | None:
        """Has a worker fold the oldest unsummarized messages into the summary until the rest fit ``max_tokens``."""
        return await self._do(self.ops.fold(max_tokens, model, wait, more.pop("prefixes", ("Human", "AI"))))

    async def extract_entities(self, first: str, last: str, *, wait: bool = True) -> EntitiesReport | None:
        """Has a worker update the entities mentioned by the messages ``first``..``last`` (stream cursors)."""
        return await self._do(self.ops.extract_entities(first, last, wait))

    async def promotion_set(self) -> MemorySet:
        """The long-term chat set this session is promoted into (unbound: pass it to ``long_term(...)`` calls)."""
        return await self._do(self.ops.memory_set(self.set_name, ChatMessage))

    async def finish(self) -> list[str]:
        """Ends the session: with summary promotion, folds everything into the summary and stores it durably."""
        return await self._do(self.ops.finish())
