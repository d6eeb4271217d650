"""A remote rerank endpoint: ``http:<url>``, the ``/rerank`` API that Cohere, Jina, Hugging Face TEI, vLLM and
Infinity serve, through httpx.

Two request shapes exist: ``{"query", "documents", "top_n"}`` (Cohere, Jina, vLLM, Infinity; ``model`` from
``MEMORY_RERANK__REMOTE_MODEL``) and ``{"query", "texts"}`` (TEI, which refuses the first with a 422). The
worker asks the endpoint once at start, in the first shape, then in TEI's if refused so, and keeps the one
answered. Both answers are read: ``{"results": [{"index", "relevance_score"}]}`` and ``[{"index", "score"}]``.

Failures: a 429, a 5xx, a timeout or an unreachable endpoint raise ``TransientRerankerError``, a refused key,
a missing route or an answer that is no ranking ``RerankerError``. Neither is retried by the worker: a search's
caller is waiting, and is told at once. The API key is never logged nor put in an error message.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx

from memory_core.core.errors import ConfigurationError, RerankerError, TransientRerankerError
from memory_core.core.settings import RerankSettings
from memory_core.engine.rerankers.base import Ranking

logger = logging.getLogger(__name__)

Shape = Literal["documents", "texts"]
"""The request shape an endpoint takes: Cohere's and Jina's (``documents``) or TEI's (``texts``)."""

_PROBE = ("memory-core checks the reranker", ["a text about the check", "an unrelated text"])


def public_url(url: str) -> str:
    """``url`` without credentials, query or fragment (which may carry a key): what logs and errors show."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class EndpointReranker:
    """Reranking by a remote endpoint; thread-safe (one httpx client shared by the worker's threads)."""

    def __init__(self, settings: RerankSettings, *, url: str) -> None:
        if urlsplit(url).scheme not in {"http", "https"}:
            raise ConfigurationError(f"MEMORY_RERANK__MODEL=http:{public_url(url)!r} needs an http:// or https:// URL")
        headers = {"content-type": "application/json"}
        if settings.api_key is not None:
            headers["authorization"] = f"Bearer {settings.api_key.get_secret_value()}"
        self._client = httpx.Client(headers=headers, timeout=settings.timeout)
        self._url = url
        self._where = f"the rerank endpoint at {public_url(url)}"
        self._timeout = settings.timeout
        self._remote_model = settings.remote_model
        try:
            self._shape: Shape = self._probe()
        except BaseException:
            self._client.close()  # the worker refuses to start: nothing is left open behind it
            raise
        logger.info("rerank endpoint %s takes %r in its requests", public_url(url), self._shape)

    @property
    def model_name(self) -> str:
        return f"http:{public_url(self._url)}"

    def rerank(self, query: str, documents: Sequence[str], top_n: int) -> Ranking:
        if not documents:
            return []
        response = self._send(self._body(self._shape, query, list(documents), top_n))
        ranking = _ranking(self._read(response), len(documents), self._where)
        return sorted(ranking, key=lambda pair: pair[1], reverse=True)[:top_n]  # TEI answers every document

    def close(self) -> None:
        """Releases the connections."""
        self._client.close()

    def _probe(self) -> Shape:
        """Asks the endpoint once in Cohere's shape, then in TEI's if it refused that as malformed (400, 422)."""
        query, documents = _PROBE
        shape: Shape = "documents"
        response = self._send(self._body(shape, query, documents, len(documents)))
        if response.status_code in (400, 422):
            other = self._send(self._body("texts", query, documents, len(documents)))
            if other.status_code == 200:
                shape, response = "texts", other
        _ranking(self._read(response), len(documents), self._where)
        return shape

    def _body(self, shape: Shape, query: str, documents: list[str], top_n: int) -> dict[str, Any]:
        if shape == "texts":  # TEI cuts a long text to the model's length only when asked to
            return {"query": query, "texts": documents, "truncate": True, "raw_scores": False}
        body: dict[str, Any] = {"query": query, "documents": documents, "top_n": top_n}
        if self._remote_model:
            body["model"] = self._remote_model
        return body

    def _send(self, body: dict[str, Any]) -> httpx.Response:
        try:
            return self._client.post(self._url, content=json.dumps(body))
        except httpx.TimeoutException as exc:
            raise TransientRerankerError(
                f"{self._where} did not answer within {self._timeout:g}s; search again, or with rerank=False "
                f"(raise MEMORY_RERANK__TIMEOUT if it is just slow)"
            ) from exc
        except httpx.HTTPError as exc:  # connection refused or reset, DNS, TLS
            raise TransientRerankerError(
                f"{self._where} cannot be reached ({type(exc).__name__}); check MEMORY_RERANK__MODEL and the "
                f"network, or search with rerank=False"
            ) from exc

    def _read(self, response: httpx.Response) -> Any:
        where, status = self._where, response.status_code
        if status in (401, 403):
            # The endpoint's message may quote part of the key: it is not repeated.
            raise RerankerError(
                f"{where} refused the API key (HTTP {status}); set MEMORY_RERANK__API_KEY to a key it accepts"
            )
        if status == 429 or status >= 500:
            state = "rate-limiting" if status == 429 else "failing"
            raise TransientRerankerError(f"{where} is {state} (HTTP {status}); search again, or with rerank=False")
        if status == 404:
            raise RerankerError(
                f"{where} has no such route (HTTP 404); MEMORY_RERANK__MODEL names the whole URL of the rerank "
                f"route, e.g. http:http://localhost:8080/rerank"
            )
        if status != 200:
            raise RerankerError(f"{where} refused the request (HTTP {status}, {_code(response)})")
        try:
            return response.json()
        except ValueError as exc:
            raise RerankerError(f"{where} sent an answer that is not JSON") from exc


def _ranking(answer: Any, count: int, where: str) -> Ranking:
    """(index, score) pairs from ``{"results": [{"index", "relevance_score"}]}`` or ``[{"index", "score"}]``."""
    rows = answer.get("results") if isinstance(answer, dict) else answer
    if not isinstance(rows, list):
        raise RerankerError(f"{where} sent an answer that is not a ranking (no list of results)")
    ranking: Ranking = []
    for row in rows:
        index = row.get("index") if isinstance(row, dict) else None
        score = row.get("relevance_score", row.get("score")) if isinstance(row, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise RerankerError(f"{where} sent a result with index {index!r:.40} for {count} documents")
        if not isinstance(score, int | float) or isinstance(score, bool):
            raise RerankerError(f"{where} sent a result with score {score!r:.40}, not a number")
        ranking.append((index, float(score)))
    return ranking


def _code(response: httpx.Response) -> str:
    """The endpoint's error code or type, never its free text (which may quote the documents)."""
    try:
        body = response.json()
    except ValueError:
        return "no error code"
    detail = body.get("error") if isinstance(body, dict) and isinstance(body.get("error"), dict) else body
    if not isinstance(detail, dict):
        return "no error code"
    code = detail.get("code") or detail.get("type") or detail.get("error_type") or "no error code"
    return str(code)[:80]
