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
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis as kombu_redis

logger = logging.getLogger(__name__)


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


class Transport(kombu_redis.Transport):
    Channel = Channel


def transport_for(broker_url: str) -> str | None:
    """The transport to use for ``broker_url``: this module's for Redis, kombu's own for anything else."""
    scheme = broker_url.split("://", 1)[0]
    return f"{__name__}:Transport" if scheme in {"redis", "rediss"} else None
