"""The worker's Redis transport: one client per connection pool for kombu's per-message bookkeeping."""

from __future__ import annotations

import uuid
from typing import Any

import redis
from kombu import Connection, Exchange, Queue

from memory_core.workers.broker import Transport


def _consume_and_ack(connection: Connection, queue: Queue, count: int) -> list[str]:
    bodies: list[str] = []

    def take(body: str, message: Any) -> None:
        bodies.append(body)
        message.ack()

    with connection.Consumer(queue, accept=["json"], callbacks=[take]):
        while len(bodies) < count:
            connection.drain_events(timeout=5)
    return bodies


def test_acknowledgements_share_one_client_and_a_new_pool_gets_a_new_one(redis_url: str, raw_redis: redis.Redis):
    name = f"transport-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, Exchange(name, type="direct"), routing_key=name)
    with Connection(redis_url, transport=Transport) as connection:
        producer = connection.Producer(serializer="json")
        for n in range(3):
            producer.publish(f"m{n}", exchange=queue.exchange, routing_key=name, declare=[queue])
        channel: Any = connection.default_channel  # our Channel; kombu types it as the abstract one
        first = channel._create_client()
        assert channel._create_client() is first
        assert sorted(_consume_and_ack(connection, queue, 3)) == ["m0", "m1", "m2"]
        assert channel._create_client() is first  # the deliveries and acks above built no other

        channel._disconnect_pools()  # what kombu does when the connection is lost
        renewed = channel._create_client()
        assert renewed is not first
        assert renewed.connection_pool is channel.pool
        producer.publish("after", exchange=queue.exchange, routing_key=name, declare=[queue])
        assert _consume_and_ack(connection, queue, 1) == ["after"]
    assert raw_redis.hlen("unacked") == 0
    assert raw_redis.zcard("unacked_index") == 0
