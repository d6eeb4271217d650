"""Checkpoints: snapshots of an agent's state per ``(namespace, thread_id, checkpoint_ns, checkpoint_id)``.

    saver = client.checkpoints("acme")
    saver.put("thread-1", {"step": 3, "messages": [...]}, metadata={"source": "loop"})
    saver.get("thread-1")                       # the newest
    saver.list("thread-1", limit=10)            # newest first

Stored in Redis as JSON only: per thread and checkpoint namespace, a hash of
checkpoint id -> snapshot and a sorted set ordering the ids by their write time. Both
expire together ``ttl`` seconds after the thread's last ``put``. A thread id is a key of
the namespace: ``client.forget(namespace, key=thread_id)`` erases its checkpoints.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from operator import methodcaller
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict, Field

from memory_core.core.errors import InvalidRequestError
from memory_core.core.jsoncodec import stored_model
from memory_core.core.keys import Keys, decoded
from memory_core.core.models import ItemId, utcnow
from memory_core.core.redis_errors import redis_failure
from memory_core.core.settings import LimitsSettings
from memory_core.core.steps import Command, Operation, Pipeline, on_redis, run, scan
from memory_core.core.validation import check_count, check_metadata, check_text, short_repr


class Checkpoint(BaseModel):
    """One snapshot. ``checkpoint`` and ``metadata`` are JSON objects; ``parent_id`` links to the one before."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    thread_id: str
    checkpoint_ns: str = ""
    id: ItemId
    parent_id: str | None = None
    checkpoint: dict[str, Any]
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime


class CheckpointOperations:
    """The logic of every checkpoint call of one namespace, as operations (``core.steps``) for both clients."""

    def __init__(
        self,
        *,
        keys: Keys,
        namespace: str,
        check_thread: Callable[[str], str],
        limits: LimitsSettings,
        ttl: int | None,
        max_per_thread: int,
        clock: Callable[[int], int],
        where: str,
    ) -> None:
        self._keys = keys
        self.namespace = namespace
        self._check_thread = check_thread
        self._limits = limits
        self._ttl = ttl
        self._max = max_per_thread
        self._clock = clock
        self._where = where

    def put(self, thread_id: str, checkpoint: dict[str, Any], **options: Any) -> Operation[Checkpoint]:
        """``options``: ``checkpoint_ns``, ``checkpoint_id``, ``parent_id``, ``metadata`` (see ``CheckpointStore.put``)."""
        checkpoint_ns: str = options.pop("checkpoint_ns", "")
        checkpoint_id: str | None = options.pop("checkpoint_id", None)
        parent_id: str | None = options.pop("parent_id", None)
        metadata: dict[str, Any] | None = options.pop("metadata", None)
        if options:
            raise TypeError(f"put() got unexpected keyword arguments {sorted(options)}")
        thread_id = self._check_thread(thread_id)
        data, order = self._redis_keys(thread_id, checkpoint_ns)
        check_metadata(checkpoint, "checkpoint", self._checkpoint_limits())
        check_metadata(metadata or {}, "checkpoint metadata", self._limits)
        checkpoint_id = checkpoint_id if checkpoint_id is not None else str(uuid.uuid4())
        if not isinstance(checkpoint_id, str) or not 1 <= len(checkpoint_id) <= 128:
            raise InvalidRequestError(f"checkpoint_id {checkpoint_id!r} must be a str of 1 to 128 characters")
        if parent_id is None:
            latest = yield from self.get(thread_id, checkpoint_ns=checkpoint_ns)
            parent_id = latest.id if latest is not None and latest.id != checkpoint_id else None
        saved = Checkpoint(
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            id=checkpoint_id,
            parent_id=parent_id,
            checkpoint=json.loads(json.dumps(checkpoint)),
            metadata=json.loads(json.dumps(metadata or {})),
            created_at=utcnow(),
        )
        score, ttl, name, raw = self._clock(1), self._ttl, checkpoint_id, saved.model_dump_json()
        writes: list[Callable[[Any], Any]] = [lambda p: p.hset(data, name, raw), lambda p: p.zadd(order, {name: score})]
        if ttl is not None:
            writes += [lambda p: p.expire(data, ttl), lambda p: p.expire(order, ttl)]
        try:
            yield Pipeline(writes)
            yield from self._trim(data, order)
        except redis.RedisError as exc:
            raise redis_failure(exc, "write a checkpoint", self._where) from exc
        return saved

    def get(
        self, thread_id: str, checkpoint_id: str | None = None, *, checkpoint_ns: str = ""
    ) -> Operation[Checkpoint | None]:
        thread_id = self._check_thread(thread_id)
        data, order = self._redis_keys(thread_id, checkpoint_ns)
        try:
            if checkpoint_id is None:
                newest = yield Command(lambda r: r.zrevrange(order, 0, 0))
                if not newest:
                    return None
                checkpoint_id = decoded(newest[0])
            name = checkpoint_id
            raw = yield Command(lambda r: r.hget(data, name))
        except redis.RedisError as exc:
            raise redis_failure(exc, "read a checkpoint", self._where) from exc
        return None if raw is None else stored_model(Checkpoint, raw, f"checkpoint {name!r}")

    def list(
        self, thread_id: str, *, checkpoint_ns: str = "", limit: int | None = None, before: str | None = None
    ) -> Operation[list[Checkpoint]]:
        thread_id = self._check_thread(thread_id)
        if limit is not None:
            check_count(limit, "limit")
        if before is not None and not isinstance(before, str):
            hint = "; pass its .id" if isinstance(before, Checkpoint) else ""
            raise InvalidRequestError(
                f"before must be a checkpoint id (str) or None, got {type(before).__name__} {short_repr(before)}{hint}"
            )
        data, order = self._redis_keys(thread_id, checkpoint_ns)
        try:
            top = "+inf"
            if before is not None:
                score = yield Command(lambda r: r.zscore(order, before))
                if score is None:
                    return []
                top = f"({int(score)}"
            count = -1 if limit is None else limit
            ids = yield Command(lambda r: r.zrevrangebyscore(order, top, "-inf", start=0, num=count))
            names = [decoded(i) for i in ids or []]
            raws = (yield Command(lambda r: r.hmget(data, names))) if names else []
        except redis.RedisError as exc:
            raise redis_failure(exc, "list checkpoints", self._where) from exc
        return [stored_model(Checkpoint, raw, f"checkpoint {n!r}") for n, raw in zip(names, raws, strict=False) if raw]

    def delete_thread(self, thread_id: str) -> Operation[int]:
        thread_id = self._check_thread(thread_id)
        pattern = self._keys.checkpoint_pattern(self.namespace, thread_id)
        try:
            found = yield from scan(pattern)
            orders = [k for k in found if decoded(k).endswith(":order")]
            counting = [methodcaller("zcard", k) for k in orders]
            sizes = (yield Pipeline(counting, transaction=False)) if orders else []
            if found:
                yield Command(lambda r: r.delete(*found))
        except redis.RedisError as exc:
            raise redis_failure(exc, "delete checkpoints", self._where) from exc
        return sum(int(size) for size in sizes)

    def _trim(self, data: str, order: str) -> Operation[None]:
        # Past max_per_thread the oldest go; two writers may both trim, which is harmless.
        excess = int((yield Command(lambda r: r.zcard(order)))) - self._max
        if excess > 0:
            oldest = yield Command(lambda r: r.zrange(order, 0, excess - 1))
            names = [decoded(i) for i in oldest]
            yield Pipeline([lambda p: p.zrem(order, *oldest), lambda p: p.hdel(data, *names)])

    def _redis_keys(self, thread_id: str, checkpoint_ns: str) -> tuple[str, str]:
        if not isinstance(checkpoint_ns, str):
            raise InvalidRequestError(f"checkpoint_ns must be a str, got {type(checkpoint_ns).__name__}")
        check_text(checkpoint_ns, "checkpoint_ns", 256)
        # Any text may name a checkpoint namespace (LangGraph's hold ':' and '|'), so it is encoded for the key.
        encoded = "n" + base64.urlsafe_b64encode(checkpoint_ns.encode()).decode("ascii").rstrip("=")
        return self._keys.checkpoints(self.namespace, thread_id, encoded)

    def _checkpoint_limits(self) -> LimitsSettings:
        # A snapshot may be larger than item metadata: allow the size of a value, and deeper nesting.
        return self._limits.model_copy(
            update={
                "max_metadata_bytes": max(self._limits.max_metadata_bytes, self._limits.max_value_chars * 4),
                "max_metadata_depth": max(self._limits.max_metadata_depth, 16),
            }
        )


class CheckpointStore:
    """Checkpoints of one namespace. Thread-safe."""

    def __init__(self, operations: CheckpointOperations, redis_client: redis.Redis) -> None:
        self._ops = operations
        self.namespace = operations.namespace
        self._perform = on_redis(redis_client)

    def __repr__(self) -> str:
        return f"CheckpointStore(namespace={self.namespace!r})"

    def put(
        self,
        thread_id: str,
        checkpoint: dict[str, Any],
        *,
        checkpoint_ns: str = "",
        checkpoint_id: str | None = None,
        parent_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Checkpoint:
        """Stores a snapshot (replacing one with the same id) and returns it; the thread's TTL restarts.

        Without ``parent_id`` the parent is the thread's newest checkpoint, if any.
        """
        operation = self._ops.put(
            thread_id,
            checkpoint,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
            parent_id=parent_id,
            metadata=metadata,
        )
        return run(operation, self._perform)

    def get(self, thread_id: str, checkpoint_id: str | None = None, *, checkpoint_ns: str = "") -> Checkpoint | None:
        """The checkpoint ``checkpoint_id``, or the thread's newest; None when there is none."""
        return run(self._ops.get(thread_id, checkpoint_id, checkpoint_ns=checkpoint_ns), self._perform)

    def list(
        self, thread_id: str, *, checkpoint_ns: str = "", limit: int | None = None, before: str | None = None
    ) -> list[Checkpoint]:
        """The thread's checkpoints, newest first; ``before`` (an id) starts just after that checkpoint.

        ``limit``: the most to return, an int from 1 to 1000000; None for all.
        """
        operation = self._ops.list(thread_id, checkpoint_ns=checkpoint_ns, limit=limit, before=before)
        return run(operation, self._perform)

    def delete_thread(self, thread_id: str) -> int:
        """Deletes every checkpoint of the thread, in every checkpoint namespace; returns how many there were."""
        return run(self._ops.delete_thread(thread_id), self._perform)


class AsyncCheckpointStore:
    """``CheckpointStore`` for asyncio code: the same calls, awaited."""

    def __init__(self, operations: CheckpointOperations, run_async: Callable[[Operation[Any]], Awaitable[Any]]) -> None:
        self._ops = operations
        self.namespace = operations.namespace
        self._run = run_async

    def __repr__(self) -> str:
        return f"AsyncCheckpointStore(namespace={self.namespace!r})"

    async def put(self, thread_id: str, checkpoint: dict[str, Any], **options: Any) -> Checkpoint:
        """See ``CheckpointStore.put`` (``checkpoint_ns``, ``checkpoint_id``, ``parent_id``, ``metadata``)."""
        saved: Checkpoint = await self._run(self._ops.put(thread_id, checkpoint, **options))
        return saved

    async def get(
        self, thread_id: str, checkpoint_id: str | None = None, *, checkpoint_ns: str = ""
    ) -> Checkpoint | None:
        """See ``CheckpointStore.get``."""
        found: Checkpoint | None = await self._run(self._ops.get(thread_id, checkpoint_id, checkpoint_ns=checkpoint_ns))
        return found

    async def list(self, thread_id: str, **options: Any) -> list[Checkpoint]:
        """See ``CheckpointStore.list`` (``checkpoint_ns``, ``limit``, ``before``)."""
        listed: list[Checkpoint] = await self._run(self._ops.list(thread_id, **options))
        return listed

    async def delete_thread(self, thread_id: str) -> int:
        """See ``CheckpointStore.delete_thread``."""
        count: int = await self._run(self._ops.delete_thread(thread_id))
        return count
