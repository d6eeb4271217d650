"""Browser fixtures: a real deployment (Redis, a Celery worker in a thread, ``memory-core serve``'s app under
uvicorn on a free loopback port, with namespace and operator tokens) and headless Chromium driving it.

The deployment is this package's own, under a key prefix of its own (``mcbrowser``): the integration tests'
session worker is a fixture of ``tests/integration/conftest.py``, and importing it here would make pytest start
a second one (a fixture is one per conftest that holds it) consuming the same queues with another store. The
helpers that build it are shared instead. Everything here is skipped, with the reason, when Debian's
``chromium`` or ``chromium-driver`` is missing (``ops/install-browser``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from pydantic import SecretStr
from selenium import webdriver

from memory_core import MemoryClient
from memory_core.core.keys import Keys
from memory_core.core.settings import Settings
from memory_core.servers.http.app import create_app
from memory_core.testing.fake_anthropic import FakeAnthropic
from memory_core.workers import services
from memory_core.workers.app import create_app as create_worker_app
from tests.browser.chrome import chrome, missing
from tests.browser.server import serving
from tests.browser.visitor import Visitor, watch_violations
from tests.integration.conftest import REDIS_URL, make_settings
from tests.integration.in_thread import in_thread_worker
from tests.integration.waiting import flush_keeping_heartbeats

TOKENS = {"tok-acme": "acme", "tok-globex": "globex"}
OPERATOR = "op-browser-token"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    reason = missing()
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.browser)
            item.add_marker(pytest.mark.integration)
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))


@dataclass(frozen=True)
class Deployment:
    """What the browser talks to: the server's origin, and the deployment's settings (without a token)."""

    origin: str
    settings: Settings

    def client(self, namespace: str) -> MemoryClient:
        """A client acting in ``namespace`` with its own token (close it)."""
        token = next(token for token, granted in TOKENS.items() if granted == namespace)
        return MemoryClient(self.settings.with_token(token))


def _settings(tmp: Path, fake: FakeAnthropic) -> Settings:
    return make_settings(
        REDIS_URL,
        tmp / "qdrant",
        redis={"url": REDIS_URL, "key_prefix": "mcbrowser"},
        embedder={"model": "hashing"},  # the console shows what is stored; which model embedded it is not tested
        anthropic={"api_key": "sk-ant-test-not-real", "base_url": fake.url, "max_retries": 0, "timeout": 5},
        auth={"tokens": SecretStr(json.dumps(TOKENS))},  # the worker checks every call's token, as in production
        console={"operator_tokens": SecretStr(json.dumps([OPERATOR])), "corrections": "all"},
    )


@pytest.fixture(scope="package")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.exit(f"Redis at {REDIS_URL} is unreachable ({exc}); run ops/test, which starts one", returncode=3)
    flush_keeping_heartbeats(REDIS_URL)
    with FakeAnthropic() as fake:
        settings = _settings(tmp_path_factory.mktemp("browser"), fake)
        worker_app = create_worker_app(settings)
        with in_thread_worker(worker_app, concurrency=2):
            try:
                with serving(create_app(settings)) as origin:
                    yield Deployment(origin, settings)
            finally:
                services.close(worker_app)


@pytest.fixture(scope="module")
def chromium(deployment: Deployment) -> Iterator[webdriver.Chrome]:
    """One browser per module (a start costs about a second); each test gets it with no cookies."""
    driver = chrome()
    try:
        watch_violations(driver)
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(chromium: webdriver.Chrome, deployment: Deployment) -> Visitor:
    """The module's browser, signed out, with the sign-in throttle of its address reset."""
    visitor = Visitor(chromium, deployment.origin)
    visitor.forget_cookies()
    with redis.Redis.from_url(REDIS_URL) as r:
        r.delete(Keys(deployment.settings.redis.key_prefix).console_failures("127.0.0.1"))
    return visitor
