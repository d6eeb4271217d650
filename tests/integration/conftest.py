"""Integration fixtures: a real Redis, a real Celery worker in a thread, the real embedded engine and embedder.

Redis comes from MEMORY_TEST_REDIS_URL (default redis://localhost:6379/15, a DB of
its own); it is flushed before each test. If it is unreachable the run stops with
one line saying how to get one: these tests never skip silently. No other database
of that server is touched: a test that needs a Redis apart takes a database of the
session's own redis-server (the ``private_redis`` fixture).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from memory_core import MemoryClient
from memory_core.core.settings import Settings
from memory_core.testing.fake_anthropic import FakeAnthropic
from memory_core.workers import services
from memory_core.workers.app import create_app

from .in_thread import in_thread_worker
from .waiting import flush_keeping_heartbeats

REDIS_URL = os.environ.get("MEMORY_TEST_REDIS_URL", "redis://localhost:6379/15")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def redis_url() -> str:
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.exit(f"Redis at {REDIS_URL} is unreachable ({exc}); run ops/test, which starts one", returncode=3)
    return REDIS_URL


def make_settings(redis_url: str, data_dir: Path, **overrides: object) -> Settings:
    """Test settings: the given Redis, the embedded engine in ``data_dir``, the real embedder, short timeouts."""
    values: dict[str, object] = {
        "redis": {"url": redis_url, "key_prefix": "mctest"},
        "qdrant": {"backend": "edge", "path": data_dir},
        # Backups and run files beside the store, never in the user's data directory.
        "stack": {
            "run_dir": data_dir.with_name(f"{data_dir.name}-run"),
            "backup_dir": data_dir.with_name(f"{data_dir.name}-backups"),
        },
        "celery": {"concurrency": 2, "max_retries": 2, "retry_backoff_max": 1},
        "client": {"timeout": 30},
        "metrics": {"port": 0},  # in-thread workers serve metrics on a free port, never a fixed one
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[arg-type]  # test-only construction


@pytest.fixture(scope="session")
def fake_anthropic() -> Iterator[FakeAnthropic]:
    """The fake Messages API the session's worker summarizes through (the real anthropic SDK talks to it)."""
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _fake_behaves(request: pytest.FixtureRequest) -> None:
    if "fake_anthropic" in request.fixturenames:
        request.getfixturevalue("fake_anthropic").behave("ok")


@pytest.fixture(scope="session")
def settings(redis_url: str, tmp_path_factory: pytest.TempPathFactory, fake_anthropic: FakeAnthropic) -> Settings:
    anthropic = {"api_key": "sk-ant-test-not-real", "base_url": fake_anthropic.url, "max_retries": 0, "timeout": 5}
    return make_settings(redis_url, tmp_path_factory.mktemp("qdrant"), anthropic=anthropic)


@pytest.fixture(scope="session")
def celery_app(settings: Settings) -> Celery:
    return create_app(settings)


@pytest.fixture(scope="session")
def worker(celery_app: Celery) -> Iterator[Celery]:
    """One real worker (thread pool, all queues) for the whole session."""
    with in_thread_worker(celery_app, concurrency=2):
        yield celery_app
    services.close(celery_app)


@pytest.fixture(autouse=True)
def _flush_redis(redis_url: str) -> None:
    flush_keeping_heartbeats(redis_url)


@pytest.fixture
def client(settings: Settings, worker: Celery) -> Iterator[MemoryClient]:
    with MemoryClient(settings) as c:
        yield c


@pytest.fixture
def raw_redis(redis_url: str) -> Iterator[redis.Redis]:
    r = redis.Redis.from_url(redis_url)
    yield r
    r.close()


@pytest.fixture
def namespace() -> str:
    """A namespace no other test uses (the embedded store lives for the whole session)."""
    import uuid

    return f"t-{uuid.uuid4().hex[:12]}"
