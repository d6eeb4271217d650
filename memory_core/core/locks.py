"""A Redis lock with an owner token and an expiry: released or extended only by its holder."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis

logger = logging.getLogger(__name__)

_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
_EXTEND = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
)


class RedisLock:
    """Single flight across processes and machines. Expiry bounds how long a crashed holder blocks others."""

    def __init__(self, client: redis.Redis, key: str, ttl_seconds: int) -> None:
        self._client = client
        self.key = key
        self._ttl_ms = ttl_seconds * 1000
        self._token = uuid.uuid4().hex

    def acquire(self, wait: float = 0.0) -> bool:
        """Takes the lock if it is free, polling for up to ``wait`` seconds; returns whether this call got it."""
        deadline = time.monotonic() + wait
        while True:
            if self._client.set(self.key, self._token, nx=True, px=self._ttl_ms):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def extend(self) -> bool:
        """Restarts the expiry; False if the lock was lost (expired and taken by another holder)."""
        return bool(self._client.eval(_EXTEND, 1, self.key, self._token, self._ttl_ms))

    def release(self) -> None:
        """Frees the lock if this holder still has it."""
        self._client.eval(_RELEASE, 1, self.key, self._token)

    @contextmanager
    def kept(self, *, waiting: str) -> Iterator[None]:
        """Holds the lock for the ``with`` block however long it runs: waits until it is free (logging
        ``waiting`` every ``ttl``), then extends it every third of its ``ttl`` until the block ends. A holder
        that dies stops extending, so the lock frees itself within one ``ttl``."""
        ttl = self._ttl_ms / 1000
        while not self.acquire(wait=ttl):
            logger.warning("waiting for %s: %s", self.key, waiting)
        done = threading.Event()

        def extend() -> None:
            while not done.wait(ttl / 3):
                try:
                    if not self.extend():
                        logger.warning("lost %s while holding it", self.key)
                        return
                except redis.RedisError as exc:  # a blip: the next round tries again before the expiry
                    logger.warning("could not extend %s: %s", self.key, exc)

        keeper = threading.Thread(target=extend, name=f"keep {self.key}", daemon=True)
        keeper.start()
        try:
            yield
        finally:
            done.set()
            keeper.join()
            self.release()
