"""A worker that embeds through an OpenAI-compatible endpoint (a fake one on loopback, through the real SDK):
a 429 is retried by the task, no sooner than its Retry-After; an endpoint that keeps failing reaches the caller
as ``EmbedderError`` and the write is dead-lettered after its retries."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_core import EmbedderError, MemoryClient
from memory_core.client.deadletters import DeadLetters
from memory_core.testing.fake_openai import VALID_KEY, FakeOpenAI
from memory_core.workers import services
from memory_core.workers.app import create_app
from tests.integration.conftest import make_settings
from tests.integration.in_thread import in_thread_worker


@pytest.fixture
def endpoint() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(dimension=16) as fake:
        yield fake


@pytest.fixture
def client(redis_url: str, tmp_path: Path, endpoint: FakeOpenAI) -> Iterator[MemoryClient]:
    settings = make_settings(
        redis_url,
        tmp_path / "qdrant",
        redis={"url": redis_url, "key_prefix": "mcopenai"},
        embedder={"model": "openai:text-embedding-3-small", "base_url": endpoint.url, "api_key": VALID_KEY},
        celery={"concurrency": 2, "max_retries": 2, "retry_backoff_max": 5},
    )
    app = create_app(settings)
    with in_thread_worker(app, concurrency=2), MemoryClient(settings) as memory:
        yield memory
    services.close(app)


def _embedding_requests(endpoint: FakeOpenAI, text: str) -> int:
    return sum(1 for body in endpoint.requests if text in body.get("input", []))


@pytest.mark.timeout(120)
def test_a_rate_limited_write_is_retried_after_the_endpoints_retry_after(client: MemoryClient, endpoint: FakeOpenAI):
    notes = client.long_term("acme", "u").get_or_create_memory_set("notes", dedup="none")
    endpoint.behave("http_429", failures=1, retry_after="2")
    started = time.monotonic()
    notes.add(["the launch moved to Friday"], ids=["launch"])
    assert time.monotonic() - started >= 2  # the retry waited for the Retry-After (backoff alone starts at ~1 s)
    assert _embedding_requests(endpoint, "the launch moved to Friday") == 2
    (hit,) = notes.search("when is the launch?", limit=1)
    assert hit.id == "launch"


@pytest.mark.timeout(120)
def test_an_endpoint_that_keeps_failing_reaches_the_caller_and_the_dead_letters(
    client: MemoryClient, endpoint: FakeOpenAI, raw_redis
):
    notes = client.long_term("acme", "u").get_or_create_memory_set("notes", dedup="none")
    endpoint.behave("http_500", retry_after=None)
    with pytest.raises(EmbedderError, match="HTTP 500"):
        notes.add(["kept for later"], ids=["later"])
    assert _embedding_requests(endpoint, "kept for later") == 3  # the first try and max_retries=2
    letters = DeadLetters(raw_redis, client.keys, client.dispatcher)
    assert "acme" in letters.namespaces()
