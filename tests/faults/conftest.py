"""Fault tests: each starts its own processes on loopback and stops them; marked slow."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from memory_core.core.settings import Settings
from tests.integration.processes import PrivateRedis, rabbitmq_missing, rabbitmq_vhost
from tests.integration.waiting import broker_drained, rabbitmq_drained


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def fault_redis_url(private_redis: PrivateRedis) -> str:
    """A Redis database of the test's own (on the session's private redis-server): no in-thread worker of the
    integration session consumes these queues."""
    return private_redis.database_url()


@pytest.fixture
def rabbitmq_url() -> Iterator[str]:
    """The broker URL of a fresh vhost on the RabbitMQ at 127.0.0.1:5672, deleted after the test (with its queues).

    A vhost is how deployments sharing a RabbitMQ are kept apart; each test gets one of its own.
    """
    reason = rabbitmq_missing()
    if reason is not None:
        pytest.skip(f"RabbitMQ broker tests need a RabbitMQ: {reason}")
    with rabbitmq_vhost(f"memory-core-test-{uuid.uuid4().hex[:12]}") as url:
        yield url


@dataclass(frozen=True)
class FaultBroker:
    """The broker a fault test runs on: the fault Redis DB, or a RabbitMQ vhost of its own."""

    url: str
    vhost: str | None = None

    @property
    def name(self) -> str:
        return "redis" if self.vhost is None else "amqp"

    def env(self) -> dict[str, str]:
        """What a worker process needs to use this broker (a Redis broker is the Redis URL itself)."""
        return {} if self.vhost is None else {"MEMORY_CELERY__BROKER_URL": self.url}

    def drained(self, settings: Settings) -> bool:
        """Whether no task of ``settings``' deployment is queued or delivered but unacknowledged."""
        if self.vhost is None:
            return broker_drained(redis.Redis.from_url(self.url), settings)
        return rabbitmq_drained(self.vhost)


@pytest.fixture(params=["redis", "amqp"])
def fault_broker(request: pytest.FixtureRequest, fault_redis_url: str) -> FaultBroker:
    """Each broker the project supports, in turn; the RabbitMQ one is skipped when no RabbitMQ is here."""
    if request.param == "redis":
        return FaultBroker(fault_redis_url)
    url: str = request.getfixturevalue("rabbitmq_url")
    return FaultBroker(url, vhost=url.rsplit("/", 1)[1])
