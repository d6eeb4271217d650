import asyncio
import json

import pytest
from starlette.requests import Request

from memory_core.core import errors
from memory_core.servers.http.errors import on_memory_error


def _answer(exc: Exception) -> tuple[int, dict[str, str], dict[str, str]]:
    request = Request({"type": "http", "method": "POST", "path": "/v1/x", "headers": []})
    response = asyncio.run(on_memory_error(request, exc))
    return response.status_code, dict(response.headers), json.loads(bytes(response.body))["error"]


def test_an_embedding_outage_answers_503_with_a_retry_after_and_says_what_became_of_the_write():
    said = "the embedding endpoint is unavailable (...); this call stops waiting, but the write is kept"
    status, headers, error = _answer(errors.TransientEmbedderError(said))
    assert (status, error) == (503, {"code": "embedder_unavailable", "message": said})
    assert headers["retry-after"] == "30"


def test_an_endpoints_own_retry_after_is_kept_when_it_asks_for_longer():
    _, headers, _ = _answer(errors.TransientEmbedderError("busy", retry_after=90.5))
    assert headers["retry-after"] == "91"


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (errors.TransientStoreError("store down"), "store_unavailable"),
        (errors.TransientRerankerError("rerank down"), "reranker_unavailable"),
        (errors.BrokerUnavailable("redis down"), "broker_unavailable"),
        (errors.NoWorkerAvailable("no worker"), "no_worker_available"),
        (errors.FormationBusy("busy", retry_after=7), "formation_busy"),
    ],
)
def test_every_503_carries_a_retry_after(exc: Exception, code: str):
    status, headers, error = _answer(exc)
    assert (status, error["code"]) == (503, code)
    assert int(headers["retry-after"]) > 0


def test_an_embedder_that_fails_for_good_is_no_503_and_has_no_retry_after():
    status, headers, error = _answer(errors.EmbedderError("refused the API key"))
    assert (status, error["code"]) == (500, "embedder_error")
    assert "retry-after" not in headers
