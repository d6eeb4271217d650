"""L2: Redis, shared by every process. An outage raises ``BrokerUnavailable`` (Redis is the broker too)."""

from __future__ import annotations

from collections.abc import Sequence

import redis

from memory_core.core.redis_errors import redis_failure


class RedisCache:
    """Values under keys built by ``memory_core.core.keys`` (prefixed and namespaced)."""

    def __init__(self, client: redis.Redis, url_for_errors: str) -> None:
        self._client = client
        self._url = url_for_errors

    def get(self, key: str) -> bytes | None:
        try:
            value = self._client.get(key)
        except redis.RedisError as exc:
            raise redis_failure(exc, "read the cache", self._url) from exc
        return value if isinstance(value, bytes) else None

    def set(self, key: str, value: bytes, ttl: float) -> None:
        try:
            self._client.set(key, value, ex=max(1, int(ttl)))
        except redis.RedisError as exc:
            raise redis_failure(exc, "write the cache", self._url) from exc

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        if not keys:
            return {}
        try:
            values = self._client.mget(list(keys))
        except redis.RedisError as exc:
            raise redis_failure(exc, "read the cache", self._url) from exc
        return {k: v for k, v in zip(keys, values, strict=True) if isinstance(v, bytes)}

    def set_many(self, entries: dict[str, bytes], ttl: float) -> None:
        if not entries:
            return
        try:
            with self._client.pipeline(transaction=False) as pipe:
                for key, value in entries.items():
                    pipe.set(key, value, ex=max(1, int(ttl)))
                pipe.execute()
        except redis.RedisError as exc:
            raise redis_failure(exc, "write the cache", self._url) from exc

    def delete(self, *keys: str) -> None:
        if not keys:
            return
        try:
            self._client.delete(*keys)
        except redis.RedisError as exc:
            raise redis_failure(exc, "delete from the cache", self._url) from exc
