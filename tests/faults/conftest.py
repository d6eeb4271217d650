"""Fault tests: each starts its own processes on loopback and stops them; marked slow."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import REDIS_URL


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def fault_redis_url() -> str:
    """A Redis DB of its own (13): no in-thread worker of the integration session consumes these queues."""
    import redis

    url = REDIS_URL.rsplit("/", 1)[0] + "/13"
    redis.Redis.from_url(url).flushdb()
    return url
