"""No secret reaches a worker's log: endpoints that quote the whole key they were sent in their errors (as
careless servers do) fail their task, and the worker's log file, tracebacks and all, holds neither key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_core import EmbedderError, MemoryClient, RerankerError
from memory_core.core.settings import Settings
from memory_core.testing import fake_openai, fake_rerank
from memory_core.testing.fake_openai import FakeOpenAI
from memory_core.testing.fake_rerank import FakeRerankEndpoint
from tests.integration.processes import celery_process
from tests.integration.waiting import wait_for

EMBEDDING_KEY = fake_openai.VALID_KEY
RERANK_KEY = fake_rerank.VALID_KEY


@pytest.fixture
def endpoints() -> Iterator[tuple[FakeOpenAI, FakeRerankEndpoint]]:
    with FakeOpenAI() as embeddings, FakeRerankEndpoint() as rerank:
        yield embeddings, rerank


@pytest.mark.timeout(180)
def test_keys_an_endpoint_echoes_in_its_errors_never_reach_the_worker_log(
    redis_url: str, tmp_path: Path, endpoints: tuple[FakeOpenAI, FakeRerankEndpoint]
):
    embeddings, rerank = endpoints
    prefix = "mcsecrets"
    env = {
        "MEMORY_REDIS__URL": redis_url,
        "MEMORY_REDIS__KEY_PREFIX": prefix,
        "MEMORY_QDRANT__PATH": str(tmp_path / "qdrant"),
        "MEMORY_METRICS__PORT": "0",
        "MEMORY_CELERY__CONCURRENCY": "2",
        "MEMORY_EMBEDDER__MODEL": "openai:text-embedding-3-small",
        "MEMORY_EMBEDDER__BASE_URL": embeddings.url,
        "MEMORY_EMBEDDER__API_KEY": EMBEDDING_KEY,
        "MEMORY_RERANK__MODEL": f"http:{rerank.url}",
        "MEMORY_RERANK__API_KEY": RERANK_KEY,
    }
    log = tmp_path / "worker.log"
    settings = Settings(_env_file=None, redis={"url": redis_url, "key_prefix": prefix}, client={"timeout": 60})
    with celery_process("worker", env, log), MemoryClient(settings) as client:
        notes = client.long_term("acme", "u").get_or_create_memory_set("notes", dedup="none")
        notes.add(["Alice prefers green tea"], ids=["tea"])

        embeddings.behave("echo_key")
        with pytest.raises(EmbedderError, match=r"refused the API key \(HTTP 401\)") as refused:
            notes.add(["the launch moved to Friday"], ids=["launch"])
        embeddings.behave("ok")
        rerank.behave("echo_key")
        with pytest.raises(RerankerError, match=r"refused the API key \(HTTP 401\)") as refused_too:
            notes.search("what does Alice drink?")
        # Both endpoints were sent their key, and quoted it back.
        assert EMBEDDING_KEY in embeddings.keys
        assert RERANK_KEY in rerank.keys
        # Celery logs each failure with its traceback once the task is done: wait for both.
        wait_for(lambda: log.read_text(errors="replace").count("Traceback (most recent call last)") >= 2, 30)
    text = log.read_text(errors="replace")
    assert "EmbedderError: the embeddings endpoint at localhost" in text  # the failures are in it, keys aside
    assert "RerankerError: the rerank endpoint at" in text
    for secret in (EMBEDDING_KEY, RERANK_KEY):
        assert secret not in text
        assert secret not in str(refused.value)
        assert secret not in str(refused_too.value)
