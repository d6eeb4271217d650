"""LangChain's chat message history over a memory-core session (``pip install 'memory-core[langchain]'``).

    history = MemoryCoreChatMessageHistory("acme", "chat-42", client=MemoryClient.from_env())
    chain = RunnableWithMessageHistory(prompt | model, lambda session_id: history, ...)

Messages live in the session's Redis history (TTL and length from ``MEMORY_SESSION__*``) and, with
``promote="messages"`` (the default), are copied into the key's long-term chat set, where search and
recall find them after the session has expired. Each message keeps LangChain's own serialized form,
so what comes back is what went in (ids, tool calls, metadata); its text is what is indexed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict

from memory_core.client import MemoryClient
from memory_core.client.aio import AsyncMemoryClient
from memory_core.client.async_session import AsyncSession
from memory_core.core.errors import CorruptDataError, InvalidRequestError
from memory_core.core.jsoncodec import stored_object
from memory_core.core.models import ChatMessage, MessageRole
from memory_core.tiers.session import Session
from memory_core.tiers.session.session import Promotion

_ROLES = {
    "human": MessageRole.USER,
    "ai": MessageRole.ASSISTANT,
    "system": MessageRole.SYSTEM,
    "tool": MessageRole.TOOL,
}
_KEY = "langchain"


def to_chat_message(message: BaseMessage) -> ChatMessage:
    """Our chat message for a LangChain one: its role and text, with LangChain's own form kept beside them."""
    if not isinstance(message, BaseMessage):
        raise InvalidRequestError(f"expected a LangChain BaseMessage, got {type(message).__name__}")
    role = _ROLES.get(message.type, MessageRole.USER)
    calls = [dict(call) for call in getattr(message, "tool_calls", None) or []]
    return ChatMessage(
        role=role, content=message.text, tool_calls=calls, extra_args={_KEY: json.dumps(message_to_dict(message))}
    )


def from_chat_message(message: ChatMessage) -> BaseMessage:
    """The LangChain message stored in ``message``; one written by other code is rebuilt from its role and text."""
    # Kept as JSON text: a message's own nesting (tool call arguments) would count against metadata depth.
    raw = message.extra_args.get(_KEY)
    stored = stored_object(raw, f"a stored LangChain {message.role.value} message") if isinstance(raw, str) else None
    if stored is None:
        kind = {v: k for k, v in _ROLES.items()}[message.role]
        data: dict[str, Any] = {"content": message.content, "type": kind}
        if kind == "tool":
            data["tool_call_id"] = message.extra_args.get("tool_call_id", "")
        stored = {"type": kind, "data": data}
    try:
        (rebuilt,) = messages_from_dict([stored])
    except (KeyError, ValueError, TypeError) as exc:  # a planted or foreign value: fail this read, typed
        raise CorruptDataError(
            f"a stored LangChain {message.role.value} message cannot be rebuilt: {exc!r}"[:300]
        ) from exc
    return rebuilt


class MemoryCoreChatMessageHistory(BaseChatMessageHistory):
    """A LangChain ``BaseChatMessageHistory`` over the session ``session_id`` of ``namespace``.

    Give ``client`` for the blocking methods, ``aclient`` for the ``a``-prefixed ones, or both. ``key`` (the
    user or agent the conversation belongs to) defaults to ``session_id``.
    """

    def __init__(
        self,
        namespace: str,
        session_id: str,
        *,
        client: MemoryClient | None = None,
        aclient: AsyncMemoryClient | None = None,
        key: str | None = None,
        promote: Promotion = "messages",
    ) -> None:
        if client is None and aclient is None:
            raise InvalidRequestError("give client= (a MemoryClient), aclient= (an AsyncMemoryClient), or both")
        self._session: Session | None = None
        self._asession: AsyncSession | None = None
        if client is not None:
            self._session = client.session(namespace, session_id, key=key, promote=promote)
        if aclient is not None:
            self._asession = aclient.session(namespace, session_id, key=key, promote=promote)
        self.namespace, self.session_id = namespace, session_id

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]  # LangChain declares it an attribute
        """Every message of the session, oldest first."""
        return [from_chat_message(m) for m in self._blocking().history.messages]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Appends the messages in one round trip (and enqueues their long-term copies)."""
        self._blocking().add_messages([to_chat_message(m) for m in messages])

    def clear(self) -> None:
        """Removes the session's messages from Redis; long-term copies stay (``client.forget`` erases them)."""
        self._blocking().history.clear()

    async def aget_messages(self) -> list[BaseMessage]:
        """Every message of the session, oldest first."""
        return [from_chat_message(m) for m in await self._awaited().messages()]

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Appends the messages in one round trip (and enqueues their long-term copies)."""
        await self._awaited().add_messages([to_chat_message(m) for m in messages])

    async def aclear(self) -> None:
        """Removes the session's messages from Redis; long-term copies stay."""
        await self._awaited().clear()

    def _blocking(self) -> Session:
        if self._session is None:
            raise RuntimeError("this history was made with aclient= only: pass client= too for the blocking methods")
        return self._session

    def _awaited(self) -> AsyncSession:
        if self._asession is None:
            raise RuntimeError("this history was made with client= only: pass aclient= too for the async methods")
        return self._asession
