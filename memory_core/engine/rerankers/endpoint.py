"""A remote rerank endpoint: ``http:<url>``, the ``/rerank`` API that Cohere, Jina, Hugging Face TEI, vLLM and
Infinity serve, through httpx.

Two request shapes exist: ``{"query", "documents", "top_n"}`` (Cohere, Jina, vLLM, Infinity; ``model`` from
``MEMORY_RERANK__REMOTE_MODEL``) and ``{"query", "texts"}`` (TEI, which refuses the first with a 422). The
worker asks the endpoint once at start, in the first shape, then in TEI's if refused so, and keeps the one
answered. Both answers are read: ``{"results": [{"index", "relevance_score"}]}`` and ``[{"index", "score"}]``.

An answer is checked in full before anything is returned (and so before a search result is cached): parsed by
``_Results`` (or ``_TEI_ANSWER``), it must score every document sent exactly once (``top_n`` asks for all of
them; the best ``top_n`` are kept here), with an index in range and a finite score. Anything else is no
ranking: a search that used a shortened or repeated one would answer fewer or other hits than asked, and keep
answering them from the cache.

Failures: a 429, a 5xx, a timeout or an unreachable endpoint raise ``TransientRerankerError``, a refused key,
a missing route or an answer that is no ranking ``RerankerError``. Neither is retried by the worker: a search's
caller is waiting, and is told at once. The API key is never logged nor put in an error message, and no error
of ours carries the endpoint's own (its body may quote the key, or the documents).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictInt, TypeAdapter, ValidationError

from memory_core.core.errors import ConfigurationError, RerankerError, TransientRerankerError
from memory_core.core.settings import RerankSettings
from memory_core.engine.rerankers.base import Ranking

logger = logging.getLogger(__name__)

Shape = Literal["documents", "texts"]
"""The request shape an endpoint takes: Cohere's and Jina's (``documents``) or TEI's (``texts``)."""

_PROBE = ("memory-core checks the reranker", ["a text about the check", "an unrelated text"])

_Score = Annotated[float, Field(strict=True, allow_inf_nan=False)]
"""A score as the endpoint sends it: a JSON number (an int or a float, never a string or a bool), finite."""


class _Result(BaseModel):
    """One document's score: ``{"index", "relevance_score"}`` (Cohere, Jina, vLLM) or ``{"index", "score"}`` (TEI);
    anything else a result holds (the document's text, Jina's ``document``) is ignored."""

    model_config = ConfigDict(extra="ignore")

    index: StrictInt
    score: _Score = Field(validation_alias=AliasChoices("relevance_score", "score"))


class _Results(BaseModel):
    """Cohere's answer: ``{"results": [...]}`` (with ``id``, ``meta``, ... beside it, ignored)."""

    model_config = ConfigDict(extra="ignore")

    results: list[_Result]


_TEI_ANSWER: TypeAdapter[list[_Result]] = TypeAdapter(list[_Result])
"""TEI's answer: a bare list of results."""


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
        # Every document's score is asked for (top_n = all of them), so the answer can be checked in full.
        response = self._send(self._body(self._shape, query, list(documents), len(documents)))
        ranking = _ranking(self._read(response), len(documents), self._where)
        return sorted(ranking, key=lambda pair: pair[1], reverse=True)[:top_n]

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
    """(index, score) of each of the ``count`` documents sent, from the endpoint's decoded JSON ``answer``.

    Raises ``RerankerError`` unless the answer parses (``_Results`` or ``_TEI_ANSWER``: integer indices, finite
    numeric scores) and scores every document exactly once: as many results as documents, each index in
    ``0..count-1`` once.
    """
    try:
        rows = (
            _Results.model_validate(answer).results if isinstance(answer, dict) else _TEI_ANSWER.validate_python(answer)
        )
    except ValidationError as exc:
        raise RerankerError(f"{where} sent an answer that is not a ranking ({_problem(exc)})") from None
    indices = [row.index for row in rows]
    if len(rows) != count:
        raise RerankerError(
            f"{where} answered {len(rows)} scores for the {count} documents sent (indices {sorted(indices)!r:.120}); "
            f"a ranking scores each document once"
        )
    if sorted(indices) != list(range(count)):
        raise RerankerError(
            f"{where} answered indices {sorted(indices)!r:.120} for {count} documents; expected each of 0 to "
            f"{count - 1} once"
        )
    return [(row.index, row.score) for row in rows]


def _problem(exc: ValidationError) -> str:
    """Where the first problem of an answer is and what it is, never the value (it may quote the documents)."""
    err = exc.errors()[0]
    where = ".".join(str(part) for part in err["loc"]) or "the answer"
    return f"{where}: {err['msg']}"


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
