"""A session's chat history: a Redis stream per ``(namespace, key, session)``, capped, with a TTL.

Stream entry ids order the messages and never repeat, so the summary strategy's
"folded up to here" cursor survives trimming. Every write renews the TTL of all
the session's keys (messages, summary state, entities) together.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from operator import methodcaller
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memory_core.core.errors import CorruptDataError, InvalidRequestError
from memory_core.core.jsoncodec import stored_model
from memory_core.core.keys import Keys
from memory_core.core.models import ChatMessage, MessageRole, utcnow
from memory_core.core.redis_errors import redis_failure
from memory_core.core.settings import LimitsSettings
from memory_core.core.steps import Command, Operation, Pipeline, on_redis, run
from memory_core.core.validation import check_count, check_value


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
        # How far formation has been fed (see ``tiers.session.formation``). It lives and dies with the messages:
        # were it to expire before them, the next save would send every message to formation again.
        self.formation = keys.session(namespace, key, session_id, "formation")

    @property
    def all(self) -> tuple[str, ...]:
        """The keys that hold the session's data: cleared together, their TTL renewed together."""
        return self.messages, self.state, self.entities, self.formation


class HistoryOperations:
    """The logic of every call on one session's messages, as operations (``core.steps``) for both clients."""

    def __init__(
        self, *, keys: SessionKeys, max_messages: int, ttl: int | None, limits: LimitsSettings, where: str
    ) -> None:
        self.keys = keys
        self.max_messages = max_messages
        self.ttl = ttl
        self._limits = limits
        self._where = where

    def checked(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
        """``messages`` if they may be appended; ``InvalidRequestError`` naming the first that may not."""
        if isinstance(messages, ChatMessage) or not isinstance(messages, Sequence):
            raise InvalidRequestError(f"messages must be a list of ChatMessage, got {type(messages).__name__}")
        for i, message in enumerate(messages):
            check_value(message, ChatMessage, f"message {i}", self._limits)
        return messages

    def add_messages(self, messages: Sequence[ChatMessage]) -> Operation[list[SessionMessage]]:
        self.checked(messages)
        now = utcnow()
        entries = [SessionMessage(id=str(uuid.uuid4()), created_at=now, message=m) for m in messages]
        if not entries:
            return []
        stream, most = self.keys.messages, self.max_messages
        appends = [methodcaller("xadd", stream, {"m": entry.model_dump_json()}) for entry in entries]
        trim = methodcaller("xtrim", stream, maxlen=most, approximate=False)
        try:
            replies = yield Pipeline([*appends, trim, *self._touches()])
        except redis.RedisError as exc:
            raise redis_failure(exc, "append to the session", self._where) from exc
        return [e.model_copy(update={"cursor": text(r)}) for e, r in zip(entries, replies, strict=False)]

    def entries(self, *, after: str | None = None, last: int | None = None) -> Operation[list[SessionMessage]]:
        stream = self.keys.messages
        if last is not None:
            check_count(last, "last", 0)
        try:
            if last is not None:
                newest = (yield Command(lambda r: r.xrevrange(stream, "+", "-", count=last))) if last > 0 else []
                return list(reversed(parse_entries(newest)))
            start = f"({after}" if after else "-"
            return parse_entries((yield Command(lambda r: r.xrange(stream, start, "+"))))
        except redis.RedisError as exc:
            raise redis_failure(exc, "read the session", self._where) from exc

    def pop(self) -> Operation[SessionMessage | None]:
        """Removes the newest message and returns it; None when the session is empty."""
        stream = self.keys.messages
        try:
            while True:
                newest = parse_entries((yield Command(lambda r: r.xrevrange(stream, "+", "-", count=1))))
                if not newest:
                    return None
                entry = newest[0]
                # XDEL answers 0 when another caller removed it first: then the next newest is ours to take.
                if (yield Command(methodcaller("xdel", stream, entry.cursor))):
                    return entry
        except redis.RedisError as exc:
            raise redis_failure(exc, "remove from the session", self._where) from exc

    def count(self) -> Operation[int]:
        try:
            return int((yield Command(lambda r: r.xlen(self.keys.messages))))
        except redis.RedisError as exc:
            raise redis_failure(exc, "read the session", self._where) from exc

    def clear(self) -> Operation[None]:
        try:
            yield Command(lambda r: r.delete(*self.keys.all))
        except redis.RedisError as exc:
            raise redis_failure(exc, "clear the session", self._where) from exc

    def summary_state(self) -> Operation[SummaryState]:
        try:
            return SummaryState.from_hash((yield Command(lambda r: r.hgetall(self.keys.state))))
        except redis.RedisError as exc:
            raise redis_failure(exc, "read the session summary") from exc

    def touch(self) -> Operation[None]:
        yield Pipeline(self._touches())

    def _touches(self) -> list[Callable[[Any], Any]]:
        if self.ttl is None:
            return []
        return [methodcaller("expire", name, self.ttl) for name in self.keys.all]


class SessionHistory:
    """The messages of one session, oldest first. Thread-safe (every operation is one Redis round trip)."""

    def __init__(self, operations: HistoryOperations, redis_client: redis.Redis) -> None:
        self.ops = operations
        self.keys = operations.keys
        self.max_messages = operations.max_messages
        self.ttl = operations.ttl
        self._perform = on_redis(redis_client)

    def add_messages(self, messages: Sequence[ChatMessage]) -> list[SessionMessage]:
        """Appends ``messages``; returns them with their ids. Past ``max_messages`` the oldest are trimmed."""
        return run(self.ops.add_messages(messages), self._perform)

    def add_user_message(self, content: str) -> SessionMessage:
        """Appends one user message."""
        return self.add_messages([ChatMessage(role=MessageRole.USER, content=content)])[0]

    def add_ai_message(self, content: str) -> SessionMessage:
        """Appends one assistant message."""
        return self.add_messages([ChatMessage(role=MessageRole.ASSISTANT, content=content)])[0]

    def entries(self, *, after: str | None = None, last: int | None = None) -> list[SessionMessage]:
        """Messages oldest first: all, those after the cursor ``after``, or the ``last`` n (an int from 0 to
        1000000)."""
        return run(self.ops.entries(after=after, last=last), self._perform)

    @property
    def messages(self) -> list[ChatMessage]:
        """All messages, oldest first."""
        return [entry.message for entry in self.entries()]

    def __len__(self) -> int:
        return run(self.ops.count(), self._perform)

    def pop(self) -> SessionMessage | None:
        """Removes the newest message from the session and returns it; None when empty. A long-term copy stays."""
        return run(self.ops.pop(), self._perform)

    def clear(self) -> None:
        """Removes the messages, the summary state, the entities and the formation feed's state of this session
        from Redis (a formation already sent still runs)."""
        run(self.ops.clear(), self._perform)

    def touch(self) -> None:
        """Renews the TTL of every key of the session."""
        run(self.ops.touch(), self._perform)


class SummaryState(BaseModel):
    """What the summary strategy keeps in Redis next to the messages."""

    summary: str = ""
    cursor: str | None = None  # the last message folded into the summary
    folded_messages: int = 0
    folded_tokens: int = 0

    @classmethod
    def from_hash(cls, raw: Any) -> SummaryState:
        """Reads the state from its Redis hash (an HGETALL reply)."""
        try:
            values = {text(k): text(v) for k, v in raw.items()}
            return cls(
                summary=values.get("summary", ""),
                cursor=values.get("cursor") or None,
                folded_messages=int(values.get("folded_messages", 0)),
                folded_tokens=int(values.get("folded_tokens", 0)),
            )
        except (ValueError, ValidationError) as exc:  # not UTF-8, not a number: a value planted under our key
            raise CorruptDataError(f"the session's summary state read back from Redis is malformed: {exc}") from exc


def parse_entries(raw: Any) -> list[SessionMessage]:
    """Stream entries (an XRANGE reply) as ``SessionMessage``s, with their cursors."""
    entries = []
    for cursor, fields in raw or []:
        message = stored_model(
            SessionMessage, fields.get(b"m", fields.get("m", b"")), f"session entry {text(cursor)!r}"
        )
        entries.append(message.model_copy(update={"cursor": text(cursor)}))
    return entries


def text(value: Any) -> str:
    """A Redis reply value (bytes or str) as str."""
    return value.decode() if isinstance(value, bytes) else str(value)
