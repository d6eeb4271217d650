"""What a Redis failure means to a caller: retry later (``BrokerUnavailable``) or not (anything else).

Only a Redis that cannot answer now is ``BrokerUnavailable``, which callers (and the HTTP
API's 503) take as "retry later": a lost connection, a timeout, a server still loading its
data, a replica that cannot take writes during a failover, a server out of memory. A command
Redis answers with an error is a bug or a value past Redis' range (``RedisCommandError``),
or a key holding a value of another type than memory-core writes there (``CorruptDataError``):
retrying fails the same way, so the caller is told so.
"""

from __future__ import annotations

import redis
from redis.exceptions import BusyLoadingError, MasterDownError, OutOfMemoryError, ReadOnlyError, TryAgainError

from memory_core.core.errors import BrokerUnavailable, CorruptDataError, MemoryCoreError, RedisCommandError

_NOT_NOW = (
    redis.ConnectionError,
    redis.TimeoutError,
    BusyLoadingError,
    ReadOnlyError,
    MasterDownError,
    OutOfMemoryError,
    TryAgainError,
)


def unavailable(exc: redis.RedisError) -> bool:
    """Whether ``exc`` says Redis cannot answer now (so a retry later may succeed)."""
    return isinstance(exc, _NOT_NOW)


def redis_failure(exc: redis.RedisError, doing: str, where: str | None = None) -> MemoryCoreError:
    """The typed error for ``exc``, raised while ``doing`` (e.g. "read a checkpoint") on Redis at ``where``.

    Raise it ``from exc``. ``where`` is the redacted URL, when the caller knows it.
    """
    server = f"Redis at {where}" if where else "Redis"
    if unavailable(exc):
        return BrokerUnavailable(f"cannot {doing}: {server} is unavailable: {exc}")
    if str(exc).startswith("WRONGTYPE"):
        return CorruptDataError(f"cannot {doing}: a key in {server} holds another type of value: {exc}")
    return RedisCommandError(f"cannot {doing}: {server} refused the command: {exc}")
