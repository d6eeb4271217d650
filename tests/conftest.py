"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_core.core.settings import Settings
from tests.integration.processes import PrivateRedis


@pytest.fixture
def unit_settings(tmp_path: Path) -> Settings:
    """Settings for tests that need no services: hashing embedder, a tmp data dir, nothing read from the env."""
    return Settings(
        _env_file=None,
        qdrant={"backend": "edge", "path": tmp_path / "qdrant"},
        embedder={"model": "hashing"},
    )


@pytest.fixture(scope="session")
def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    """The session's own redis-server, started when a test first needs it: every Redis a test uses besides
    ``MEMORY_TEST_REDIS_URL``'s database is one of its databases (``private_redis.database_url()``)."""
    server = PrivateRedis(tmp_path_factory.mktemp("private-redis") / "redis.log")
    try:
        yield server
    finally:
        server.close()
