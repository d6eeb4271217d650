"""Sending tasks and waiting for their replies, without importing Celery.

The client publishes Celery protocol-2 messages with kombu (JSON only), so an
app process needs neither Celery nor the worker code. A worker pushes each
task's outcome to a namespaced Redis list (``Keys.reply``); a waiting client
pops it. Flower and ``celery inspect`` see ordinary Celery tasks.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from amqp.exceptions import AMQPError, MessageNacked
from kombu import Connection, Queue
from kombu.exceptions import KombuError, OperationalError
from kombu.pools import ProducerPool
from redis.backoff import NoBackoff
from redis.retry import Retry

from memory_core.core import tracing
from memory_core.core.auth import AUTH_HEADER
from memory_core.core.errors import BrokerUnavailable, MemoryCoreError, NoWorkerAvailable, ReplyTimeout, error_types
from memory_core.core.jsoncodec import stored_model
from memory_core.core.keys import Keys
from memory_core.core.liveness import MISSED_BEATS, alive
from memory_core.core.messages import NamespaceRequest, Reply
from memory_core.core.redis_errors import redis_failure, unavailable
from memory_core.core.routing import ROUTES, broker_options, task_queues
from memory_core.core.settings import Settings, redact_url
from memory_core.core.steps import Command, Operation, Sleep, on_redis, run

logger = logging.getLogger(__name__)

_POOL_SIZE = 16
SENT_AT_HEADER = "memory_sent_at"
"""The header a task message carries its publishing time in (epoch seconds, the client's clock)."""
_ORIGIN = f"memory-core-client@{socket.gethostname()}:{os.getpid()}"


RECONNECTED_ERRORS: tuple[type[redis.RedisError], ...] = (redis.ConnectionError,)
"""The errors a command is sent again for, once, on a new connection (see ``open_redis``)."""


def open_redis(settings: Settings, *, url: str | None = None) -> redis.Redis:
    """A Redis client for caches and replies (or ``url``), with timeouts so an outage fails fast instead of hanging.

    A pooled connection that a Redis restart closed fails the first command sent on it; that command is sent
    once more on a new connection (``RECONNECTED_ERRORS`` only, at once), so a restart costs no call, and a
    real outage still fails at once (the new connection is refused). A timeout is not retried: the server is
    slow or gone, and a second try would only double the wait.

    A command is repeated only if its connection broke: one sent on a connection the restart closed never
    ran. One that ran before the connection dropped (a rare, narrow window) runs twice, which our writes
    allow: a task message is a task id its task is idempotent on, a reply or a dead letter read twice is the
    same, a set's version and size bound may only grow, and usage statistics may count one more.
    """
    return redis.Redis.from_url(
        url or settings.redis.url,
        socket_timeout=settings.redis.socket_timeout,
        socket_connect_timeout=settings.redis.socket_timeout,
        decode_responses=False,
        health_check_interval=30,
        retry=reconnect_once(),
    )


def reconnect_once() -> Retry:
    """The retry policy of every blocking Redis pool of memory-core: once, at once, on a connection error."""
    return Retry(NoBackoff(), 1, supported_errors=RECONNECTED_ERRORS)


def client_token(settings: Settings) -> Callable[[str], str | None]:
    """The token a client sends for any namespace: its own (``MEMORY_CLIENT__TOKEN``), or none."""
    token = settings.client.token.get_secret_value() if settings.client.token else None
    return lambda namespace: token


def celery_message(
    task: str, task_id: str, kwargs: dict[str, Any], summary: str, *, countdown: float | None = None
) -> tuple[Any, dict[str, Any]]:
    """The body and headers of a Celery protocol-2 task message.

    ``summary`` becomes ``kwargsrepr``: what Flower and logs show. It names the scope
    and counts, never memory text. ``countdown``: seconds from now before a worker runs it (Celery's ETA,
    an aware UTC time by this process's clock); None or 0 runs it as soon as a worker takes it.
    """
    eta = (datetime.now(UTC) + timedelta(seconds=countdown)).isoformat() if countdown and countdown > 0 else None
    headers: dict[str, Any] = {
        "lang": "py",
        "task": task,
        "id": task_id,
        "shadow": None,
        "eta": eta,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [None, None],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": "()",
        "kwargsrepr": summary,
        "origin": _ORIGIN,
        "ignore_result": False,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
        SENT_AT_HEADER: time.time(),  # the worker measures how long the task waited in its queue
    }
    body: tuple[list[Any], dict[str, Any], dict[str, Any]] = (
        [],
        kwargs,
        {"callbacks": None, "errbacks": None, "chain": None, "chord": None},
    )
    return body, headers


class Dispatching:
    """What both dispatchers share: task messages, worker checks and reply waits (as operations, see ``core.steps``)."""

    def __init__(self, settings: Settings, keys: Keys, token_for: Callable[[str], str | None] | None = None) -> None:
        self._settings = settings
        self._keys = keys
        # Which token to send for a namespace: the client's own, or (in workers) the one that grants it.
        self._token_for = token_for or client_token(settings)
        # When each queue was last seen consumed: a hot loop of calls reads the heartbeats once a beat.
        self._consumed_at: dict[str, float] = {}
        self._beat = settings.celery.heartbeat_interval
        self.closed = False

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("this memory-core client is closed; create a new one")

    def message(
        self, task: str, kwargs: dict[str, Any], summary: str, namespace: str | None, *, countdown: float | None = None
    ) -> tuple[str, str, Any, dict[str, Any]]:
        """A new task's id, its queue, and the body and headers of its message (with the namespace's token); a
        ``countdown`` (seconds) delays it (see ``celery_message``)."""
        task_id = str(uuid.uuid4())
        body, headers = celery_message(task, task_id, kwargs, summary, countdown=countdown)
        token = self._token_for(namespace) if namespace else None
        if token:
            headers[AUTH_HEADER] = token  # a header, not an argument: never in Flower's args or dead letters
        return task_id, ROUTES[task], body, headers

    def requiring(self, task: str) -> Operation[None]:
        """Raises ``NoWorkerAvailable`` unless a live worker consumes ``task``'s queue; nothing is sent."""
        self._check_open()
        queue = ROUTES[task]
        # A worker beats every interval: one that is up but whose last beat was lost (Redis restarted
        # without persistence) is found again within one, so look that long before saying none is up.
        deadline = time.monotonic() + self._beat
        try:
            while not (consumed := (yield from self._consumed(queue))) and time.monotonic() < deadline:
                yield Sleep(min(0.1, self._beat))
        except redis.RedisError as exc:
            raise redis_failure(exc, "read worker heartbeats", redact_url(self._settings.redis.url)) from exc
        if not consumed:
            raise NoWorkerAvailable(
                f"no worker consumes queue {queue!r} (none has sent a heartbeat in the last "
                f"{self._beat * MISSED_BEATS:g}s); nothing was enqueued. Start one: memory-core up, "
                f"or celery -A memory_core.workers.app worker -Q {queue}"
            )

    def _consumed(self, queue: str) -> Operation[bool]:
        now = time.monotonic()
        if now - self._consumed_at.get(queue, -1e9) < self._beat:
            return True
        live = bool((yield from alive(self._keys, self._keys.queue_workers(queue))))
        if live:
            self._consumed_at[queue] = now
        return live

    def waiting(
        self,
        namespace: str,
        task_id: str,
        timeout: float | None = None,
        *,
        shared: bool = False,
        task: str | None = None,
    ) -> Operation[dict[str, Any]]:
        """Waits until the worker replies; returns the result or raises the worker's typed error.

        ``shared``: other callers wait for the same task (coalesced adds), so the reply is put back
        for them after it is read; the copy left over expires with the reply's TTL.
        ``task``: its name; while no live worker consumes its queue for ``client.worker_grace`` seconds,
        the wait ends with ``NoWorkerAvailable`` (the task stays queued and runs when a worker starts).
        """
        self._check_open()
        limit = self._settings.client.timeout if timeout is None else timeout
        queue = ROUTES.get(task or "")
        unconsumed_since: float | None = None
        key = self._keys.reply(namespace, task_id)
        deadline = time.monotonic() + limit
        # Block in slices shorter than the socket timeout, so a dead Redis shows up as an error, not a hang.
        slice_seconds = max(0.1, self._settings.redis.socket_timeout * 0.8)
        popped = None
        lost_since: float | None = None  # when Redis stopped answering, while it is not answering
        while popped is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReplyTimeout(
                    f"no reply to task {task_id} within {limit:.1f}s; it may still run (is a worker up?)"
                )
            block = min(remaining, slice_seconds, self._beat)
            try:
                if shared:
                    peeked = yield _peek(key, block)
                    popped = None if peeked is None else (key, peeked)
                else:
                    popped = yield _pop(key, block)
                lost_since = None
                if popped is None and queue is not None:
                    now = time.monotonic()
                    if (yield from self._consumed(queue)):
                        unconsumed_since = None
                    elif unconsumed_since is None:
                        unconsumed_since = now
                    elif now - unconsumed_since >= self._settings.client.worker_grace:
                        raise NoWorkerAvailable(
                            f"no worker has consumed queue {queue!r} for "
                            f"{self._settings.client.worker_grace:g}s while waiting for task {task_id}; "
                            "it stays queued and runs when a worker starts"
                        )
            except redis.RedisError as exc:
                if not unavailable(exc):  # Redis refused a command: waiting longer would not change that
                    raise redis_failure(exc, f"wait for task {task_id}", redact_url(self._settings.redis.url)) from exc
                # The task is queued (durably, with AOF): ride out a Redis restart, not an outage.
                now = time.monotonic()
                lost_since = now if lost_since is None else lost_since
                if now - lost_since >= self._settings.client.reconnect_window:
                    url = redact_url(self._settings.redis.url)
                    raise BrokerUnavailable(f"lost Redis at {url} waiting for task {task_id}: {exc}") from exc
                yield Sleep(min(0.5, max(0.0, remaining)))
        return outcome(popped[1])


def _pop(key: str, seconds: float) -> Command:
    return Command(lambda r: r.blpop([key], timeout=seconds))


def _peek(key: str, seconds: float) -> Command:
    # The reply list holds one reply: moving it onto its own list reads it and leaves it for the other callers
    # in one atomic command (a pop then a push back could lose it to an error or an interruption in between).
    # It keeps the TTL the worker set. (B)RPOPLPUSH rather than BLMOVE: it works on Redis before 6.2 too.
    return Command(lambda r: r.brpoplpush(key, key, timeout=seconds))


def outcome(raw: bytes) -> dict[str, Any]:
    """The result in a worker's reply, or its typed error raised."""
    reply = stored_model(Reply, raw, "a task's reply")
    if reply.ok:
        return reply.result or {}
    assert reply.error is not None
    raise error_types().get(reply.error.type, MemoryCoreError)(reply.error.message)


class Dispatcher(Dispatching):
    """Publishes task messages to their queues and waits for replies, blocking. Thread-safe."""

    def __init__(
        self,
        settings: Settings,
        redis_client: redis.Redis,
        keys: Keys,
        token_for: Callable[[str], str | None] | None = None,
    ) -> None:
        super().__init__(settings, keys, token_for)
        self._redis = redis_client
        self._perform = on_redis(redis_client)
        self._broker = redact_url(settings.broker_url)
        self._connection = Connection(
            settings.broker_url,
            connect_timeout=settings.redis.socket_timeout,
            transport_options={
                "visibility_timeout": settings.celery.visibility_timeout,
                "socket_timeout": settings.redis.socket_timeout,
                "socket_connect_timeout": settings.redis.socket_timeout,
                # kombu reconnects on its own before publishing; bound that so an outage fails fast.
                "max_retries": settings.client.publish_retries,
                "interval_start": 0,
                "interval_step": 0.2,
                "interval_max": 0.5,
                # The workers' prefix (workers/app.py): this deployment's queues, not another's on the same DB.
                # (On AMQP a deployment is its vhost, named in the URL.)
                **({"global_keyprefix": settings.broker_key_prefix} if settings.broker_key_prefix else {}),
                # On AMQP, publisher confirms: a publish returns once RabbitMQ has the message, or raises.
                **broker_options(settings.broker_url),
            },
        )
        # Declared as the workers declare them (RabbitMQ refuses a second, different declaration).
        self._queues = {queue.name: queue for queue in task_queues(settings.broker_url)}
        # A pool of our own: kombu's global pools are keyed by URL and outlive a closed client.
        self._producers = ProducerPool(self._connection.Pool(limit=_POOL_SIZE), limit=_POOL_SIZE)

    def require_worker(self, task: str) -> None:
        """Raises ``NoWorkerAvailable`` unless a live worker consumes ``task``'s queue; nothing is sent."""
        run(self.requiring(task), self._perform)

    def send(self, task: str, request: NamespaceRequest, summary: str, *, countdown: float | None = None) -> str:
        """Publishes one task; returns its id. Raises ``BrokerUnavailable`` if the broker cannot take it.

        ``countdown``: seconds before a worker runs it (the worker holds the message until then).
        """
        kwargs = {"request": request.model_dump(mode="json")}
        return self.send_raw(task, kwargs, summary, request.namespace, countdown=countdown)

    def send_raw(
        self,
        task: str,
        kwargs: dict[str, Any],
        summary: str,
        namespace: str | None = None,
        *,
        countdown: float | None = None,
    ) -> str:
        """Publishes a task with these exact arguments (a dead letter's, on replay); returns its id."""
        self._check_open()
        task_id, queue, body, headers = self.message(task, kwargs, summary, namespace, countdown=countdown)
        with tracing.producer_span(f"publish {task}"):
            tracing.inject(headers)  # the trace goes on in the worker (nothing is added when no span records)
            self._publish(task, self._queues[queue], body, headers)
        return task_id

    def _publish(self, task: str, queue: Queue, body: Any, headers: dict[str, Any]) -> None:
        retries = self._settings.client.publish_retries
        try:
            with self._producers.acquire(block=True, timeout=self._settings.client.timeout) as producer:
                producer.publish(
                    body,
                    exchange="",
                    routing_key=queue.name,
                    declare=[queue],
                    serializer="json",
                    headers=headers,
                    correlation_id=headers["id"],
                    delivery_mode=2,
                    # How long to wait for RabbitMQ's publisher confirm; a timeout raises (unused on Redis).
                    confirm_timeout=self._settings.client.timeout,
                    retry=retries > 0,
                    retry_policy={
                        "max_retries": retries,
                        "interval_start": 0.1,
                        "interval_step": 0.3,
                        "interval_max": 1,
                    },
                )
        except (OperationalError, KombuError, OSError, redis.RedisError, AMQPError, MessageNacked) as exc:
            # MessageNacked: RabbitMQ refused the message (e.g. a full queue); it is not queued.
            raise BrokerUnavailable(f"cannot publish {task} to the broker at {self._broker}: {exc}") from exc

    def wait(self, namespace: str, task_id: str, timeout: float | None = None, **options: Any) -> dict[str, Any]:
        """Blocks until the worker replies; see ``Dispatching.waiting`` (``shared``, ``task``)."""
        return run(self.waiting(namespace, task_id, timeout, **options), self._perform)

    def call(self, task: str, request: NamespaceRequest, summary: str, timeout: float | None = None) -> dict[str, Any]:
        """``send`` then ``wait``; raises ``NoWorkerAvailable`` at once, sending nothing, if no worker would take it."""
        self.require_worker(task)
        return self.wait(request.namespace, self.send(task, request, summary), timeout, task=task)

    def close(self) -> None:
        """Releases broker connections; later calls raise at once."""
        self.closed = True
        self._producers.force_close_all()  # type: ignore[attr-defined]  # kombu-stubs omit Resource methods
        self._producers.connections.force_close_all()
        self._connection.release()
