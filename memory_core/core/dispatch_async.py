"""Sending tasks and waiting for their replies on the running event loop (``AsyncMemoryClient``).

The logic is ``dispatch.Dispatching``'s, shared with the blocking dispatcher; only the I/O
differs. On a Redis broker a task message goes straight onto its queue with one ``LPUSH``
of the envelope kombu itself would write (``redis_envelope``), so publishing never leaves
the loop. Other brokers (AMQP) have no asyncio publisher in kombu: their messages are
published by the blocking dispatcher in a worker thread.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import uuid
from collections import OrderedDict
from typing import Any

import redis
import redis.asyncio
from kombu.serialization import dumps
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff

from memory_core.core import tracing
from memory_core.core.dispatch import RECONNECTED_ERRORS, Dispatcher, Dispatching
from memory_core.core.errors import BrokerUnavailable, ReplyTimeout
from memory_core.core.keys import Keys
from memory_core.core.messages import NamespaceRequest
from memory_core.core.settings import Settings, redact_url
from memory_core.core.steps import Operation, on_redis_async, run_async

_KEPT_REPLIES = 4096
"""Replies of shared tasks kept in the process, newest last."""


def _driver() -> dict[str, Any]:
    # redis-py 7.1+ looks its own version up in the installed metadata for every new connection unless told
    # (~1 ms each: 200 calls opening connections at once stalled the loop for 160 ms). Older versions read it once.
    try:
        from redis.driver_info import DriverInfo
    except ImportError:
        return {}
    return {"driver_info": DriverInfo(name="redis-py", lib_version=redis.__version__)}


def open_async_redis(settings: Settings, *, url: str | None = None) -> redis.asyncio.Redis:
    """An asyncio Redis client with the blocking client's timeouts and retry policy (see ``open_redis``), and a pool
    that queues callers past its size."""
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        url or settings.redis.url,
        max_connections=settings.client.async_connections,
        timeout=settings.client.timeout,
        socket_timeout=settings.redis.socket_timeout,
        socket_connect_timeout=settings.redis.socket_timeout,
        health_check_interval=30,
        retry=AsyncRetry(NoBackoff(), 1, supported_errors=RECONNECTED_ERRORS),
        **_driver(),
    )
    return redis.asyncio.Redis(connection_pool=pool, decode_responses=False)


def redis_envelope(task_id: str, queue: str, body: Any, headers: dict[str, Any]) -> str:
    """The message kombu's Redis transport pushes for a persistent, JSON-serialized task on the default exchange."""
    content_type, content_encoding, data = dumps(body, serializer="json")
    raw = data.encode(content_encoding) if isinstance(data, str) else data
    return json.dumps(
        {
            "body": base64.b64encode(raw).decode("ascii"),
            "content-encoding": content_encoding,
            "content-type": content_type,
            "headers": headers,
            "properties": {
                "correlation_id": task_id,
                "delivery_mode": 2,
                "delivery_info": {"exchange": "", "routing_key": queue},
                "priority": 0,
                "body_encoding": "base64",
                "delivery_tag": str(uuid.uuid4()),
            },
        }
    )


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class AsyncDispatcher(Dispatching):
    """Publishes task messages and waits for replies without blocking the event loop."""

    def __init__(self, settings: Settings, redis_client: redis.asyncio.Redis, keys: Keys) -> None:
        super().__init__(settings, keys)
        self._redis = redis_client
        self._perform = on_redis_async(redis_client)
        self._broker = redact_url(settings.broker_url)
        self._broker_redis: redis.asyncio.Redis | None = None
        if settings.broker_is_redis:
            same = settings.broker_url == settings.redis.url
            self._broker_redis = redis_client if same else open_async_redis(settings, url=settings.broker_url)
        self._blocking: Dispatcher | None = None  # publishes on AMQP, from a worker thread
        self._replies: OrderedDict[str, asyncio.Future[dict[str, Any]]] = OrderedDict()

    async def run(self, operation: Operation[Any]) -> Any:
        """Drives a Redis-only operation on this dispatcher's connections."""
        return await run_async(operation, self._perform)

    async def require_worker(self, task: str) -> None:
        """Raises ``NoWorkerAvailable`` unless a live worker consumes ``task``'s queue; nothing is sent."""
        await self.run(self.requiring(task))

    async def send(self, task: str, request: NamespaceRequest, summary: str, *, countdown: float | None = None) -> str:
        """Publishes one task; returns its id. Raises ``BrokerUnavailable`` if the broker cannot take it.

        ``countdown``: seconds before a worker runs it (the worker holds the message until then).
        """
        self._check_open()
        kwargs = {"request": request.model_dump(mode="json")}
        if self._broker_redis is None:
            blocking = self._blocking_dispatcher()
            return await asyncio.to_thread(
                functools.partial(blocking.send_raw, countdown=countdown), task, kwargs, summary, request.namespace
            )
        task_id, queue, body, headers = self.message(task, kwargs, summary, request.namespace, countdown=countdown)
        with tracing.producer_span(f"publish {task}"):
            tracing.inject(headers)
            envelope = redis_envelope(task_id, queue, body, headers)
            try:
                await self._broker_redis.lpush(self._settings.broker_key_prefix + queue, envelope)
            except redis.RedisError as exc:
                raise BrokerUnavailable(f"cannot publish {task} to the broker at {self._broker}: {exc}") from exc
        return task_id

    async def wait(self, namespace: str, task_id: str, timeout: float | None = None, **options: Any) -> dict[str, Any]:
        """Waits for the worker's reply; see ``Dispatching.waiting`` (``shared``, ``task``).

        Callers of this process that share a task (merged adds) share one read of its reply, instead of
        each reading it and putting it back for the next. The read runs as a task of its own and each caller
        waits for it at most its own ``timeout``, so a caller that gives up or is cancelled ends only its own
        wait; a read that failed is not kept (the next caller reads again).
        """
        if not options.get("shared"):
            result: dict[str, Any] = await self.run(self.waiting(namespace, task_id, timeout, **options))
            return result
        loop = asyncio.get_running_loop()
        limit = self._settings.client.timeout if timeout is None else timeout
        deadline = loop.time() + limit
        while True:
            remaining = deadline - loop.time()
            reading = self._shared_reading(namespace, task_id, remaining, options)
            try:
                shared: dict[str, Any] = await asyncio.wait_for(asyncio.shield(reading), max(0.0, remaining))
                return shared
            except TimeoutError:
                pass
            except ReplyTimeout as exc:
                # A plain timeout is the bound of the caller that started the read: one with time left reads on.
                if type(exc) is not ReplyTimeout:
                    raise
            if loop.time() >= deadline:
                raise ReplyTimeout(
                    f"no reply to task {task_id} within {limit:.1f}s; it may still run (is a worker up?)"
                ) from None

    def _shared_reading(
        self, namespace: str, task_id: str, timeout: float, options: dict[str, Any]
    ) -> asyncio.Future[dict[str, Any]]:
        reading = self._replies.get(task_id)
        if reading is None or (reading.done() and (reading.cancelled() or reading.exception() is not None)):
            reading = asyncio.ensure_future(self.run(self.waiting(namespace, task_id, timeout, **options)))
            reading.add_done_callback(_retrieve)  # its callers may all have given up: they had their own outcome
            self._replies[task_id] = reading
            self._replies.move_to_end(task_id)
            while len(self._replies) > _KEPT_REPLIES:  # done ones stay a while, for a receipt waited on later
                self._replies.popitem(last=False)
        return reading

    async def call(
        self, task: str, request: NamespaceRequest, summary: str, timeout: float | None = None
    ) -> dict[str, Any]:
        """``send`` then ``wait``; raises ``NoWorkerAvailable`` at once, sending nothing, if no worker would take it."""
        await self.require_worker(task)
        return await self.wait(request.namespace, await self.send(task, request, summary), timeout, task=task)

    def _blocking_dispatcher(self) -> Dispatcher:
        if self._blocking is None:
            # Its Redis client is never used: this one only publishes, and kombu connects on the first publish.
            self._blocking = Dispatcher(self._settings, redis.Redis.from_url(self._settings.redis.url), self._keys)
        return self._blocking

    async def close(self) -> None:
        """Releases connections; later calls raise at once."""
        self.closed = True
        if self._blocking is not None:
            await asyncio.to_thread(self._blocking.close)
        if self._broker_redis is not None and self._broker_redis is not self._redis:
            await self._broker_redis.aclose(close_connection_pool=True)
