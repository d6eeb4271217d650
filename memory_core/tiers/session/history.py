"""A session's chat history: a Redis stream per ``(namespace, key, session)``, capped, with a TTL.

Stream entry ids order the messages and never repeat, so the summary strategy's
"folded up to here" cursor survives trimming. Every write renews the TTL of all
the session's keys (messages, summary state, entities) together.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict, Field

from memory_core.core.errors import BrokerUnavailable, InvalidRequestError
from memory_core.core.keys import Keys
from memory_core.core.models import ChatMessage, MessageRole, utcnow
from memory_core.core.settings import LimitsSettings
from memory_core.core.validation import check_value


class SessionMessage(BaseModel):
    """A chat message as the session keeps it: with its id and the time it was added.

    ``cursor`` is its place in the session (the stream entry id); it is set on messages read back.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    created_at: datetime
    message: ChatMessage
    cursor: str | None = Field(default=None, exclude=True)

    @property
    def role(self) -> MessageRole:
        return self.message.role

    @property
    def content(self) -> str:
        return self.message.content


class SessionKeys:
    """The Redis keys of one session."""

    def __init__(self, keys: Keys, namespace: str, key: str, session_id: str) -> None:
        self.messages = keys.session(namespace, key, session_id, "messages")
        self.state = keys.session(namespace, key, session_id, "state")
        self.entities = keys.session(namespace, key, session_id, "entities")
        self.lock = keys.session(namespace, key, session_id, "lock")

    @property
    def all(self) -> tuple[str, str, str]:
        return self.messages, self.state, self.entities


class SessionHistory:
    """The messages of one session, oldest first. Thread-safe (every operation is one Redis round trip)."""

    def __init__(
        self,
        *,
        redis_client: redis.Redis,
        keys: SessionKeys,
        max_messages: int,
        ttl: int | None,
        limits: LimitsSettings,
        where: str,
    ) -> None:
        self._redis = redis_client
        self.keys = keys
        self.max_messages = max_messages
        self.ttl = ttl
        self._limits = limits
        self._where = where

    def add_messages(self, messages: Sequence[ChatMessage]) -> list[SessionMessage]:
        """Appends ``messages``; returns them with their ids. Past ``max_messages`` the oldest are trimmed."""
        if isinstance(messages, ChatMessage) or not isinstance(messages, Sequence):
            raise InvalidRequestError(f"messages must be a list of ChatMessage, got {type(messages).__name__}")
        for i, message in enumerate(messages):
            check_value(message, ChatMessage, f"message {i}", self._limits)
        now = utcnow()
        entries = [SessionMessage(id=str(uuid.uuid4()), created_at=now, message=m) for m in messages]
        if not entries:
            return []
        try:
            with self._redis.pipeline(transaction=True) as pipe:
                for entry in entries:
                    pipe.xadd(self.keys.messages, {"m": entry.model_dump_json()})
                pipe.xtrim(self.keys.messages, maxlen=self.max_messages, approximate=False)
                self._touch(pipe)
                replies = pipe.execute()
        except redis.RedisError as exc:
            raise BrokerUnavailable(f"cannot append to the session in Redis at {self._where}: {exc}") from exc
        return [e.model_copy(update={"cursor": text(r)}) for e, r in zip(entries, replies, strict=False)]

    def add_user_message(self, content: str) -> SessionMessage:
        """Appends one user message."""
        return self.add_messages([ChatMessage(role=MessageRole.USER, content=content)])[0]

    def add_ai_message(self, content: str) -> SessionMessage:
        """Appends one assistant message."""
        return self.add_messages([ChatMessage(role=MessageRole.ASSISTANT, content=content)])[0]

    def entries(self, *, after: str | None = None, last: int | None = None) -> list[SessionMessage]:
        """Messages oldest first: all, those after the cursor ``after``, or the ``last`` n."""
        try:
            if last is not None:
                newest = self._redis.xrevrange(self.keys.messages, "+", "-", count=last) if last > 0 else []
                return list(reversed(parse_entries(newest)))
            start = f"({after}" if after else "-"
            return parse_entries(self._redis.xrange(self.keys.messages, start, "+"))
        except redis.RedisError as exc:
            raise BrokerUnavailable(f"cannot read the session from Redis at {self._where}: {exc}") from exc

    @property
    def messages(self) -> list[ChatMessage]:
        """All messages, oldest first."""
        return [entry.message for entry in self.entries()]

    def __len__(self) -> int:
        try:
            return int(self._redis.xlen(self.keys.messages))
        except redis.RedisError as exc:
            raise BrokerUnavailable(f"cannot read the session from Redis at {self._where}: {exc}") from exc

    def clear(self) -> None:
        """Removes the messages, the summary state and the entities of this session from Redis."""
        try:
            self._redis.delete(*self.keys.all)
        except redis.RedisError as exc:
            raise BrokerUnavailable(f"cannot clear the session in Redis at {self._where}: {exc}") from exc

    def touch(self) -> None:
        """Renews the TTL of every key of the session."""
        with self._redis.pipeline(transaction=True) as pipe:
            self._touch(pipe)
            pipe.execute()

    def _touch(self, pipe: Any) -> None:
        if self.ttl is not None:
            for name in self.keys.all:
                pipe.expire(name, self.ttl)


class SummaryState(BaseModel):
    """What the summary strategy keeps in Redis next to the messages."""

    summary: str = ""
    cursor: str | None = None  # the last message folded into the summary
    folded_messages: int = 0
    folded_tokens: int = 0

    @classmethod
    def from_hash(cls, raw: Any) -> SummaryState:
        """Reads the state from its Redis hash (an HGETALL reply)."""
        values = {text(k): text(v) for k, v in raw.items()}
        return cls(
            summary=values.get("summary", ""),
            cursor=values.get("cursor") or None,
            folded_messages=int(values.get("folded_messages", 0)),
            folded_tokens=int(values.get("folded_tokens", 0)),
        )


def parse_entries(raw: Any) -> list[SessionMessage]:
    """Stream entries (an XRANGE reply) as ``SessionMessage``s, with their cursors."""
    entries = []
    for cursor, fields in raw or []:
        message = SessionMessage.model_validate_json(fields[b"m"] if b"m" in fields else fields["m"])
        entries.append(message.model_copy(update={"cursor": text(cursor)}))
    return entries


def text(value: Any) -> str:
    """A Redis reply value (bytes or str) as str."""
    return value.decode() if isinstance(value, bytes) else str(value)
