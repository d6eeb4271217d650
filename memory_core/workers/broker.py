"""The Redis broker transport the worker uses: kombu's, with its crashes on a lost connection fixed.

When Redis goes away while tasks are in flight, Celery 5.7 (kombu 5.7) can touch
a channel whose transport it has already detached, and kombu raises an
``AttributeError`` that Celery treats as unrecoverable: the worker exits. Two
paths do it (both found by ``tests/faults/test_redis_restart.py``):

* closing the broken connection a second time asks the QoS to push delivered but
  unacknowledged messages back to their queues;
* a task that was running in the thread pool (which cannot cancel it) finishes and
  acknowledges its message on the old channel.

Nothing is lost by skipping both: the messages are still in Redis's unacked index,
and Redis hands them to a worker again when their visibility timeout passes (our
tasks are idempotent). So on a detached channel these calls log and return, and the
worker goes on to reconnect.

A queue entry the worker cannot decode or route (not JSON, a body that is not base64
or not a protocol-2 task, no task id or name: what a buggy producer, a truncated
write or anyone with broker access leaves there) used to stop it: kombu decodes the
entry unguarded and Celery takes the error for an unrecoverable one, and the message,
by then in the unacked index, came back to stop every worker after it. Here every
entry is checked before kombu or Celery see it; one that fails is moved, raw, to the
unroutable dead letters (``memory-core dead-letters list --namespace '!ops'``), one
line is logged, and the worker goes on serving.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import redis
from kombu.transport import redis as kombu_redis

from memory_core.core import metrics, routing
from memory_core.core.dispatch import reconnect_once

logger = logging.getLogger(__name__)

_poison_letters: tuple[Callable[[], redis.Redis], str] | None = None
_client: redis.Redis | None = None


def keep_poison_in(connect: Callable[[], redis.Redis], key: str) -> None:
    """Where this process puts queue entries it cannot use: a Redis list (opened on first use)."""
    global _poison_letters, _client
    _poison_letters, _client = (connect, key), None


def poison_reason(entry: Any) -> str | None:
    """Why a decoded queue entry cannot be a task message for this worker, or None when it can."""
    if not isinstance(entry, dict):
        return f"the entry is a JSON {type(entry).__name__}, not an object"
    properties, headers, body = entry.get("properties"), entry.get("headers"), entry.get("body")
    if not isinstance(properties, dict) or "delivery_tag" not in properties:
        return "properties.delivery_tag is missing"
    if not isinstance(properties.get("delivery_info"), dict):
        return "properties.delivery_info is not an object"
    if not isinstance(headers, dict):
        return "headers is not an object"
    for field in ("id", "task"):
        if not isinstance(headers.get(field), str) or not headers[field]:
            return f"headers.{field} is {headers.get(field)!r}, not a non-empty string"
    if not isinstance(body, str):
        return f"the body is a {type(body).__name__}, not text"
    if entry.get("content-type") != "application/json" or entry.get("content-encoding", "utf-8") != "utf-8":
        # The workers accept JSON only: any other serializer's content is never run.
        return f"content type {entry.get('content-type')!r:.80} in {entry.get('content-encoding')!r:.40} is not JSON"
    try:
        raw = base64.b64decode(body, validate=True) if properties.get("body_encoding") == "base64" else body.encode()
        task_body = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, RecursionError, MemoryError) as exc:  # see _UNDECODABLE
        return f"the body cannot be decoded ({type(exc).__name__}: {exc!s:.200})"
    if not (
        isinstance(task_body, list)
        and len(task_body) == 3
        and isinstance(task_body[0], list)
        and isinstance(task_body[1], dict)
        and isinstance(task_body[2], dict | None)
    ):
        return "the body is not a task's [args, kwargs, options]"
    return None


def _dead_letter(raw: str, reason: str, queue: str | None) -> None:
    """Moves an unusable entry, as it was, to the unroutable dead letters; logs one line."""
    global _client
    metrics.DEAD_LETTERS.labels("unroutable").inc()
    if _poison_letters is None:
        logger.error("dropped a queue entry of %s that is no task message (%s): no dead-letter list", queue, reason)
        return
    connect, key = _poison_letters
    letter = {
        "task": "unroutable",
        "task_id": "",
        "kwargs": {"raw": raw, "queue": queue},
        "error": {"type": "UnroutableMessage", "message": reason},
        "retries": 0,
        "failed_at": datetime.now(UTC).isoformat(),
    }
    try:
        _client = _client or connect()
        _client.rpush(key, json.dumps(letter))
    except redis.RedisError:
        logger.critical("dropped a queue entry of %s that is no task message (%s): Redis refused it", queue, reason)
        return
    logger.warning("moved a queue entry of %s that is no task message to %s: %s", queue, key, reason)


# What kombu's decoding of a queue entry raises for one that is no JSON it can read: invalid JSON or UTF-8, JSON
# nested past the recursion limit (RecursionError), numbers past int's digit limit (ValueError), or one too large
# to hold (MemoryError). Connection errors are none of these: kombu reconnects on those.
_UNDECODABLE = (ValueError, RecursionError, MemoryError)


def _raw_of(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return exc.doc
    if isinstance(exc, UnicodeDecodeError):
        return exc.object.decode("utf-8", errors="replace")
    # Nesting or size: the decoder keeps no copy of its input, and the entry is already off its queue.
    return f"(entry not kept: {type(exc).__name__})"


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc!s:.200}"


class QoS(kombu_redis.QoS):
    def _detached(self) -> bool:
        transport = self.channel.connection
        return transport is None or transport.client is None

    def restore_unacked(self, client: Any = None) -> Any:
        delivered = self._delivered
        if client is None and delivered and self._detached():
            logger.warning(
                "broker connection lost with %d task(s) unacknowledged; Redis redelivers them after the "
                "visibility timeout",
                len(delivered),
            )
            delivered.clear()
            return None
        return super().restore_unacked(client)

    def ack(self, delivery_tag: str) -> None:
        if self._detached():
            logger.warning("cannot acknowledge a task on a lost broker connection; it will be redelivered")
            return
        super().ack(delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if self._detached():
            logger.warning("cannot reject a task on a lost broker connection; it will be redelivered")
            return
        super().reject(delivery_tag, requeue=requeue)


class Channel(kombu_redis.Channel):
    QoS = QoS
    _sync_client: Any = None

    def _connparams(self, asynchronous: bool = False) -> Any:
        params = super()._connparams(asynchronous)  # type: ignore[misc]  # kombu's Redis channel, untyped
        if not asynchronous:
            # Acknowledgements and publishes on a pooled connection a Redis restart closed are sent once more on
            # a new one, as every memory-core pool does (``open_redis``). Not the BRPOP connection: kombu reads
            # its replies itself and reconnects it after an error.
            params["retry"] = reconnect_once()
        return params

    def _create_client(self, asynchronous: bool = False) -> Any:
        # kombu builds a new client object for each delivery's bookkeeping and each acknowledgement, twice
        # per task message, and building one (its table of reply parsers) cost more worker CPU than the
        # commands it sends. A client holds no connection (each command borrows one from the pool), so one
        # per pool serves every thread; a new pool after a lost connection gets a new client.
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[misc]  # kombu's Redis channel, untyped
        pool = self.pool
        client = self._sync_client
        if client is None or client.connection_pool is not pool:
            client = self._sync_client = super()._create_client()  # type: ignore[misc]  # as above
        return client

    def _brpop_read(self, **options: Any) -> Any:
        # The entry is already popped when kombu fails to decode it: nothing else holds it now.
        try:
            return super()._brpop_read(**options)  # type: ignore[misc]  # kombu's Redis channel, untyped
        except _UNDECODABLE as exc:
            _dead_letter(_raw_of(exc), f"the entry is not JSON ({_short(exc)})", None)
            return True

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        while True:  # a poison entry is skipped: the caller asked for a message
            try:
                return super()._get(queue)
            except _UNDECODABLE as exc:
                _dead_letter(_raw_of(exc), f"the entry is not JSON ({_short(exc)})", queue)


class Transport(kombu_redis.Transport):
    Channel = Channel

    def _deliver(self, message: Any, queue: str | None) -> None:
        # Checked before kombu records it as unacknowledged and before Celery routes it. Only entries of our
        # task queues: control messages (Flower switching task events on, inspect, ping) are no tasks.
        try:
            reason = poison_reason(message) if (queue or "").rsplit("/", 1)[-1] in routing.QUEUES else None
        except Exception as exc:  # noqa: BLE001  # any failure to check an entry is the entry's fault: never the worker's
            reason = f"the entry cannot be checked ({_short(exc)})"
        if reason is not None:
            _dead_letter(_dumped(message), reason, queue)
            return
        super()._deliver(message, queue)


def _dumped(message: Any) -> str:
    try:
        return json.dumps(message)
    except (ValueError, TypeError, RecursionError, MemoryError) as exc:
        return f"(entry not kept: {type(exc).__name__})"


def transport_for(broker_url: str) -> str | None:
    """The transport to use for ``broker_url``: this module's for Redis, kombu's own for anything else."""
    scheme = broker_url.split("://", 1)[0]
    return f"{__name__}:Transport" if scheme in {"redis", "rediss"} else None
