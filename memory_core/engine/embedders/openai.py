"""Any OpenAI-compatible ``/v1/embeddings`` endpoint (OpenAI, Azure OpenAI, Ollama, vLLM, TEI, LiteLLM):
``openai:<model>``, through the official ``openai`` SDK.

Requests: at most ``batch_size`` texts (and never over OpenAI's 2048) and ``REQUEST_TOKEN_BUDGET`` tokens each,
counted with the project's cl100k tokenizer (OpenAI's embedding models' own); a text over
``MAX_INPUT_TOKENS`` is cut to fit, as the endpoint would refuse it whole.

Failures: the SDK's own retries are off. A 429, a 5xx, a timeout or an unreachable endpoint raises
``TransientEmbedderError`` (carrying the endpoint's ``Retry-After``), which the task layer retries with backoff,
so no worker thread sleeps waiting for an endpoint. A refused key, an unknown model, a vector of another
length than the first, or an answer that is not an embeddings response raises ``EmbedderError``: a retry
would fail the same way. The API key is never logged nor put in an error message.

Vectors are L2-normalized here: OpenAI's are already, other servers' may not be, and the store compares by
cosine on unit vectors.

Usage: after each answered request, the tokens the endpoint reports (or our count, when it reports none) go to
the ``on_usage`` hook, which the worker points at the usage ledger (``metering``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from memory_core.core.errors import ConfigurationError, EmbedderError, TransientEmbedderError
from memory_core.core.metrics import MODEL_TOKENS
from memory_core.core.settings import EmbedderSettings
from memory_core.core.tokens import TokenCounter, default_counter
from memory_core.engine.embedders.base import EmbedderFingerprint, UsageHook

logger = logging.getLogger(__name__)

MAX_INPUTS = 2048
"""OpenAI's limit of inputs per embeddings request."""
REQUEST_TOKEN_BUDGET = 240_000
"""Tokens per request: OpenAI allows 300,000; the margin covers servers whose tokenizer counts more."""
MAX_INPUT_TOKENS = 8191
"""OpenAI's limit per input; longer texts are cut to it (counted in cl100k)."""
DEFAULT_BASE_URL = "https://api.openai.com/v1"

_LOOPBACK = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


def endpoint_host(base_url: str | None) -> str:
    """The host an endpoint runs on, lower-cased, without scheme, port or path; loopback names are one.

    It goes into the fingerprint: two providers may serve different models under one name (an Azure deployment
    is named by its owner, an Ollama tag is not OpenAI's model), so a store filled through one host is not
    searched through another. A port or path change on the same host is not a change of model.
    """
    host = (urlsplit(base_url or DEFAULT_BASE_URL).hostname or "").lower()
    return "localhost" if host in _LOOPBACK else host


def _retry_after(headers: Any) -> float | None:
    """Seconds from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date), if the endpoint sent one."""
    if headers is None:
        return None
    milliseconds = headers.get("retry-after-ms")
    try:
        if milliseconds is not None:
            return max(0.0, float(milliseconds) / 1000)
    except ValueError:
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


class OpenAIEmbedder:
    """Embeddings from a remote endpoint; thread-safe (the SDK client is shared across the worker's threads)."""

    def __init__(self, settings: EmbedderSettings, *, model: str, on_usage: UsageHook | None = None) -> None:
        try:
            import openai
        except ImportError as exc:
            raise EmbedderError("openai: models need the openai SDK; pip install 'memory-core[openai]'") from exc
        if settings.api_key is None and settings.base_url is None:
            raise ConfigurationError(
                f"MEMORY_EMBEDDER__MODEL='openai:{model}' with OpenAI's endpoint needs MEMORY_EMBEDDER__API_KEY; "
                "or set MEMORY_EMBEDDER__BASE_URL to a server that needs no key (e.g. http://localhost:11434/v1)"
            )
        self._openai = openai
        # Passed explicitly, so the SDK never falls back to reading OPENAI_API_KEY from the environment.
        key = settings.api_key.get_secret_value() if settings.api_key is not None else "no-key"
        self._client = openai.OpenAI(
            api_key=key, base_url=settings.base_url or DEFAULT_BASE_URL, timeout=settings.timeout, max_retries=0
        )
        self._model = model
        self._host = endpoint_host(settings.base_url)
        self._requested_dimensions = settings.dimensions
        self._dimension: int | None = settings.dimensions
        self._timeout = settings.timeout
        self._max_inputs = min(settings.batch_size, MAX_INPUTS)
        self._tokens: TokenCounter = default_counter()
        self._lock = threading.Lock()
        self.on_usage = on_usage

    @property
    def model_name(self) -> str:
        return f"openai:{self._model}"

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self.embed(["memory-core asks the endpoint for its vector length"])
        assert self._dimension is not None  # set by the first answer
        return self._dimension

    @property
    def fingerprint(self) -> EmbedderFingerprint:
        return EmbedderFingerprint(
            provider="openai",
            model=self._model,
            revision=self._host,
            dimension=self.dimension,
            pooling="remote",
            normalized=True,
        )

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for batch, counted in self._batches([self._fit(text) for text in texts]):
            vectors.extend(self._request(batch, counted))
        return vectors

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        # The endpoint's model decides; OpenAI's models take queries and documents alike.
        return self.embed(texts)

    def _fit(self, text: str) -> tuple[str, int]:
        """The text as sent (cut to ``MAX_INPUT_TOKENS``) and its token count; an empty text is sent as one space,
        which OpenAI accepts where it refuses ``""``."""
        text = text or " "
        count = self._tokens.count(text)
        while count > MAX_INPUT_TOKENS:
            text = text[: max(1, int(len(text) * MAX_INPUT_TOKENS / count * 0.95))]
            count = self._tokens.count(text)
        return text, count

    def _batches(self, fitted: list[tuple[str, int]]) -> list[tuple[list[str], int]]:
        """Texts in order, in requests of at most ``max_inputs`` texts and ``REQUEST_TOKEN_BUDGET`` tokens."""
        batches: list[tuple[list[str], int]] = []
        for text, count in fitted:
            if not batches or len(batches[-1][0]) >= self._max_inputs or batches[-1][1] + count > REQUEST_TOKEN_BUDGET:
                batches.append(([], 0))
            texts, used = batches[-1]
            texts.append(text)
            batches[-1] = (texts, used + count)
        return batches

    def _request(self, batch: list[str], counted: int) -> list[list[float]]:
        openai = self._openai
        extra: dict[str, Any] = {"dimensions": self._requested_dimensions} if self._requested_dimensions else {}
        where = f"the embeddings endpoint at {self._host} (model {self._model!r})"
        try:
            response = self._client.embeddings.create(model=self._model, input=batch, encoding_format="float", **extra)
        except openai.APITimeoutError as exc:
            raise TransientEmbedderError(
                f"{where} did not answer within {self._timeout:g}s; retried later (raise MEMORY_EMBEDDER__TIMEOUT "
                f"if it is just slow)"
            ) from exc
        except openai.APIConnectionError as exc:
            raise TransientEmbedderError(
                f"{where} cannot be reached ({type(exc.__cause__ or exc).__name__}); retried later: check "
                f"MEMORY_EMBEDDER__BASE_URL and the network"
            ) from exc
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            # The endpoint's message may quote part of the key: it is not repeated.
            raise EmbedderError(
                f"{where} refused the API key (HTTP {exc.status_code}); set MEMORY_EMBEDDER__API_KEY to a key "
                f"it accepts for this model"
            ) from exc
        except openai.APIStatusError as exc:
            status = exc.status_code
            if status == 429 or status >= 500:
                wait = _retry_after(exc.response.headers)
                after = f" after {wait:g}s (its Retry-After)" if wait is not None else " with backoff"
                raise TransientEmbedderError(
                    f"{where} is {'rate-limiting' if status == 429 else 'failing'} (HTTP {status}); retried{after}",
                    retry_after=wait,
                ) from exc
            if status == 404:
                raise EmbedderError(
                    f"{where} has no model {self._model!r} (HTTP 404); set MEMORY_EMBEDDER__MODEL=openai:<a model "
                    f"it serves> or fix MEMORY_EMBEDDER__BASE_URL"
                ) from exc
            raise EmbedderError(f"{where} refused the request (HTTP {status}, {_code(exc)})") from exc
        except (openai.OpenAIError, ValueError) as exc:  # a body that is not JSON, or not an embeddings response
            raise EmbedderError(
                f"{where} sent an answer that is not an embeddings response ({type(exc).__name__})"
            ) from exc
        vectors = self._vectors(response, len(batch), where)
        tokens = _used_tokens(response) or counted  # a server that reports no usage is metered by our count
        MODEL_TOKENS.labels(self.model_name, "embedding").inc(tokens)
        if self.on_usage is not None:
            self.on_usage(self.model_name, tokens, len(batch))
        return vectors

    def _vectors(self, response: Any, expected: int, where: str) -> list[list[float]]:
        data = getattr(response, "data", None)
        try:
            rows = sorted(data or [], key=lambda item: int(item.index))
            vectors = [[float(x) for x in row.embedding] for row in rows]
        except (TypeError, ValueError, AttributeError) as exc:
            raise EmbedderError(f"{where} sent embeddings that are not lists of numbers") from exc
        if len(vectors) != expected:
            raise EmbedderError(f"{where} answered {len(vectors)} embeddings for {expected} texts")
        lengths = {len(vector) for vector in vectors}
        with self._lock:
            if self._dimension is None and len(lengths) == 1:
                self._dimension = lengths.pop()
                lengths = {self._dimension}
                logger.info(
                    "embeddings endpoint %s serves %s at %d dimensions", self._host, self._model, self._dimension
                )
        if lengths != {self._dimension}:
            raise EmbedderError(
                f"{where} sent vectors of {sorted(lengths)} dimensions, expected {self._dimension}; it serves "
                f"another model than the store was filled with (or ignores MEMORY_EMBEDDER__DIMENSIONS): point it "
                f"back, or change the store's embedder with memory-core reindex"
            )
        matrix = np.asarray(vectors, dtype=np.float64)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        if not np.all(np.isfinite(norms)) or np.any(norms == 0):
            raise EmbedderError(f"{where} sent a zero or non-finite vector")
        return [row.tolist() for row in (matrix / norms)]


def _code(exc: Any) -> str:
    """The endpoint's error code or type, never its free text (which may quote the input)."""
    body = exc.body if isinstance(getattr(exc, "body", None), dict) else {}
    detail = body.get("error", body) if isinstance(body.get("error", body), dict) else {}
    code = detail.get("code") or detail.get("type") or "no error code"
    return str(code)[:80]


def _used_tokens(response: Any) -> int:
    usage = getattr(response, "usage", None)
    tokens = getattr(usage, "prompt_tokens", None) or getattr(usage, "total_tokens", None)
    return int(tokens) if isinstance(tokens, int) and tokens >= 0 else 0
