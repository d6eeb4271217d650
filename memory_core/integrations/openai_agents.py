"""The OpenAI Agents SDK's ``Session`` over a memory-core session (``pip install 'memory-core[openai-agents]'``).

    session = MemoryCoreSession("chat-42", aclient=AsyncMemoryClient.from_env(), namespace="acme")
    result = await Runner.run(agent, "What did I order?", session=session)

Items live in the session's Redis history (TTL and length from ``MEMORY_SESSION__*``) and, with
``promote="messages"`` (the default), are copied into the key's long-term chat set, where search and
recall find them. Each item is kept exactly as the SDK gave it; its text (a message's content, a tool
call's name and arguments, a tool's output) is what is indexed.

With ``form_into="facts"``, each ``add_items`` also hands the user's and the assistant's messages (their text;
tool calls and outputs are left out) to memory formation (``remember``, in the background), which forms facts
from them into that long-term set of the same key. Each message's id is its session message id, so
``forget_sources`` erases what a session message taught.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agents.memory import SessionSettings

from memory_core.client.aio import AsyncMemoryClient
from memory_core.client.checks import SET_NAME, checked
from memory_core.core.errors import InvalidRequestError
from memory_core.core.jsoncodec import stored_json
from memory_core.core.models import ChatMessage, MessageRole
from memory_core.tiers.session.history import SessionMessage
from memory_core.tiers.session.session import Promotion

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

_ROLES = {"user": MessageRole.USER, "assistant": MessageRole.ASSISTANT, "system": MessageRole.SYSTEM}
_ROLES["developer"] = MessageRole.SYSTEM
_KEY = "openai_agents_item"
_SAID = frozenset({MessageRole.USER, MessageRole.ASSISTANT})
"""The roles whose messages are formed into facts: what the user and the assistant said."""


def to_chat_message(item: Any) -> ChatMessage:
    """Our chat message for an SDK input item: a role and its text, with the item itself kept beside them."""
    if not isinstance(item, dict):
        raise InvalidRequestError(f"expected an input item (a dict), got {type(item).__name__}")
    role = _ROLES.get(str(item.get("role", "")), MessageRole.TOOL)
    # Kept as JSON text: an item's own nesting (content parts, tool arguments) would count against metadata depth.
    return ChatMessage(role=role, content=_text(item), extra_args={_KEY: json.dumps(item)})


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict) and "text" in part)
    if item.get("type") == "function_call":
        return f"{item.get('name', '')}({item.get('arguments', '')})"
    if "output" in item:
        output = item["output"]
        return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    return ""


def from_chat_message(message: ChatMessage) -> Any:
    """The SDK item stored in ``message``; one written by other code becomes a message item of its role."""
    stored = message.extra_args.get(_KEY)
    if isinstance(stored, str):
        return stored_json(stored, f"a stored OpenAI Agents {message.role.value} item")
    role = "assistant" if message.role is MessageRole.ASSISTANT else message.role.value
    return {"role": "user" if role == "tool" else role, "content": message.content}


def _said(items: Sequence[Any], entries: Sequence[SessionMessage]) -> list[dict[str, Any]]:
    """What the user and the assistant said among ``items`` (as the session stored them, in ``entries``), as
    formation takes it: message items with text, each with its session message id and time."""
    said = []
    for item, entry in zip(items, entries, strict=True):
        message = entry.message
        if message.role in _SAID and item.get("type", "message") == "message" and message.content.strip():
            said.append(
                {"role": message.role.value, "content": message.content, "id": entry.id, "at": entry.created_at}
            )
    return said


class MemoryCoreSession:
    """An OpenAI Agents SDK ``Session`` (``get_items``, ``add_items``, ``pop_item``, ``clear_session``) over the
    memory-core session ``session_id`` of ``namespace``. ``key`` (the user or agent) defaults to ``session_id``.

    ``form_into``: a long-term set of the key that facts are formed into from the user's and the assistant's
    messages as they are added (``remember``, in the background); None (the default) forms nothing.
    """

    def __init__(
        self,
        session_id: str,
        *,
        aclient: AsyncMemoryClient,
        namespace: str,
        key: str | None = None,
        promote: Promotion = "messages",
        session_settings: SessionSettings | None = None,
        form_into: str | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings: SessionSettings | None = session_settings or SessionSettings()
        # Checked now: past the history's write, a bad name would fail every turn after storing it.
        self.form_into = None if form_into is None else checked(SET_NAME, form_into, "form_into set name")
        self._session = aclient.session(namespace, session_id, key=key, promote=promote)
        self._long_term = aclient.long_term(self._session.namespace, self._session.key)
        self._max_messages = aclient.settings.formation.max_messages

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items in order; with ``limit`` (or the settings' limit), the newest that many."""
        settings = self.session_settings
        last = limit if limit is not None else (settings.limit if settings is not None else None)
        entries = await self._session.entries(last=last)
        return [from_chat_message(entry.message) for entry in entries]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Appends the items in one round trip (and enqueues their long-term copies); with ``form_into``, then
        sends their messages to be formed into facts (an operation of at most ``MEMORY_FORMATION__MAX_MESSAGES``
        messages each), without waiting for it."""
        added = await self._session.add_messages([to_chat_message(item) for item in items])
        if self.form_into is None:
            return
        said = _said(items, added)
        for start in range(0, len(said), self._max_messages):
            await self._long_term.remember(said[start : start + self._max_messages], set_name=self.form_into)

    async def pop_item(self) -> TResponseInputItem | None:
        """Removes the newest item and returns it; None when the session is empty. Its long-term copy stays."""
        popped = await self._session.pop()
        return None if popped is None else from_chat_message(popped.message)

    async def clear_session(self) -> None:
        """Removes every item of the session from Redis; long-term copies stay (``forget`` erases them)."""
        await self._session.clear()
