"""Which workers are alive, and which queues they consume: heartbeats in Redis.

Each worker writes one key about itself (``Keys.worker``) every ``interval`` seconds, with an expiry
of a few intervals, and names itself in the set of each queue it consumes. Redis expires the key of
a worker that stopped beating, so no clock of ours is compared. Readers (the client before it waits,
``memory-core status``, ``up``) read the sets and keep the members whose key still exists; they drop
the rest from the sets as they go.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis

from memory_core.core.files import disk_usage
from memory_core.core.keys import Keys, decoded
from memory_core.core.settings import QdrantSettings, redact_url
from memory_core.core.steps import Command, Operation, on_redis, run

logger = logging.getLogger(__name__)

MISSED_BEATS = 4
"""A worker is alive while its last beat is younger than this many intervals."""

STORE_MEASURE_INTERVAL = 30.0
"""Seconds between two measures of the embedded store's size on disk (a walk of its files) by the heartbeat."""


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker says of itself in each beat."""

    hostname: str
    queues: tuple[str, ...]
    embedded_store: str = ""  # the absolute path of the embedded store it holds; empty on a Qdrant server
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)
    started_at: float = field(default_factory=time.time)
    name: str = ""
    store: str = ""  # the store's backend (edge, server, local): what ``status`` reports, not its own settings
    store_location: str = ""  # the embedded store's absolute path, or the Qdrant server's URL (no password)
    store_bytes: int | None = None  # the embedded store's size on disk, measured every STORE_MEASURE_INTERVAL
    embedder: str = ""  # the fingerprint of the embedder it runs (``describe()``); empty before it loaded it
    reranker: str | None = None  # its MEMORY_RERANK__MODEL (``reranker_of``), "" when off; None: an earlier version
    former: str | None = None  # who forms its facts: MEMORY_FORMATION__MODEL, or "verbatim" without an API key

    def __post_init__(self) -> None:
        if not self.name:  # unique even for two workers of one node name (in one process, or after a restart)
            object.__setattr__(self, "name", f"{self.hostname}/{uuid.uuid4().hex[:8]}")

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes | str) -> WorkerInfo:
        """Reads a beat; fields a newer worker adds are left out, so an older reader still reads it."""
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise TypeError(f"a heartbeat is a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)} - {"queues"}
        return cls(**{k: v for k, v in data.items() if k in known}, queues=tuple(data.get("queues", ())))


def reranker_of(model: str) -> str:
    """What a worker publishes of its reranker (``MEMORY_RERANK__MODEL``, "" when off): an endpoint's URL without
    credentials, query or fragment, which may carry a key."""
    provider, _, url = model.partition(":")
    if provider != "http":
        return model
    parts = urlsplit(url)
    return f"http:{urlunsplit((parts.scheme, parts.netloc.rpartition('@')[2], parts.path, '', ''))}"


def store_fields(qdrant: QdrantSettings) -> dict[str, Any]:
    """What a worker publishes of the store it serves (``WorkerInfo``'s store fields), from its settings."""
    if qdrant.backend == "server":
        return {"store": "server", "store_location": redact_url(qdrant.url or "")}
    path = str(qdrant.path.resolve())
    if qdrant.backend == "local":
        return {"store": "local", "store_location": qdrant.url or path}
    return {"store": "edge", "store_location": path, "embedded_store": path}


class Heartbeat:
    """Publishes one worker's liveness from a daemon thread until ``stop``."""

    def __init__(self, client: redis.Redis, keys: Keys, info: WorkerInfo, *, interval: float) -> None:
        self._client = client
        self._keys = keys
        self.info = info
        self._interval = interval
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._measured_at: float | None = None

    def _measure_store(self) -> None:
        """Refreshes ``store_bytes`` of an embedded store when the last measure is old enough."""
        now = time.monotonic()
        if not self.info.embedded_store or (
            self._measured_at is not None and now - self._measured_at < STORE_MEASURE_INTERVAL
        ):
            return
        path = Path(self.info.embedded_store)
        try:
            size = disk_usage(path) if path.exists() else 0
        except OSError as exc:  # a file the engine removed while it was walked: measured at the next beat
            logger.debug("store size not measured: %s", exc)
            return
        self._measured_at = now
        self.info = replace(self.info, store_bytes=size)

    def beat(self) -> None:
        """One beat: this worker's key, refreshed, and its name in each of its queues' sets."""
        self._measure_store()
        ttl_ms = int(self._interval * MISSED_BEATS * 1000)
        with self._client.pipeline(transaction=False) as pipe:
            pipe.set(self._keys.worker(self.info.name), self.info.to_json(), px=ttl_ms)
            pipe.sadd(self._keys.workers(), self.info.name)
            for queue in self.info.queues:
                pipe.sadd(self._keys.queue_workers(queue), self.info.name)
            pipe.execute()

    def start(self) -> None:
        """Beats once now (so a caller right after start-up finds this worker), then every interval."""
        self.beat()
        self._thread = threading.Thread(target=self._run, name="memory-core-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                self.beat()
            # Redis is away (the key expires, callers see no worker), or its connection was closed under the
            # beat by a shutdown racing it (redis-py raises ValueError or OSError then): the next beat tries again.
            except (redis.RedisError, ValueError, OSError) as exc:
                logger.warning("heartbeat not written: %s", exc)

    def stop(self) -> None:
        """Stops beating and withdraws this worker at once (callers need not wait for the expiry)."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=self._interval + 1)
        try:
            with self._client.pipeline(transaction=False) as pipe:
                pipe.delete(self._keys.worker(self.info.name))
                pipe.srem(self._keys.workers(), self.info.name)
                for queue in self.info.queues:
                    pipe.srem(self._keys.queue_workers(queue), self.info.name)
                pipe.execute()
        except redis.RedisError as exc:
            logger.warning("heartbeat not withdrawn (it expires on its own): %s", exc)


def alive(keys: Keys, members_key: str) -> Operation[list[WorkerInfo]]:
    """The workers named in ``members_key`` whose heartbeat is current; drops the others from it."""
    raw_names = yield Command(lambda r: r.smembers(members_key))
    names = sorted(decoded(name) for name in raw_names)
    if not names:
        return []
    values = yield Command(lambda r: r.mget([keys.worker(name) for name in names]))
    alive = [info for value in values if value is not None and (info := _read_beat(value)) is not None]
    gone = [name for name, value in zip(names, values, strict=True) if value is None]
    if gone:
        yield Command(lambda r: r.srem(members_key, *gone))
    return alive


def _read_beat(raw: bytes | str) -> WorkerInfo | None:
    try:
        return WorkerInfo.from_json(raw)
    except (ValueError, TypeError) as exc:  # read from Redis: a bad record is skipped, never a crash
        logger.warning("unreadable worker heartbeat skipped: %s", exc)
        return None


def _alive(client: redis.Redis, keys: Keys, members_key: str) -> list[WorkerInfo]:
    return run(alive(keys, members_key), on_redis(client))


def live_workers(client: redis.Redis, keys: Keys) -> list[WorkerInfo]:
    """Every worker whose heartbeat is current, oldest first."""
    return sorted(_alive(client, keys, keys.workers()), key=lambda w: w.started_at)


def consumers(client: redis.Redis, keys: Keys, queue: str) -> list[WorkerInfo]:
    """The live workers that consume ``queue``."""
    return _alive(client, keys, keys.queue_workers(queue))


def holding(workers: Iterable[WorkerInfo], store: str) -> list[WorkerInfo]:
    """The workers that hold the embedded store at ``store`` (an absolute path)."""
    return [w for w in workers if w.embedded_store and w.embedded_store == store]
