"""Any OpenAI-compatible ``/v1/embeddings`` endpoint (OpenAI, Azure OpenAI, Ollama, vLLM, TEI, LiteLLM):
``openai:<model>``, through the official ``openai`` SDK.

Requests: at most ``batch_size`` texts (and never over OpenAI's 2048) and ``REQUEST_TOKEN_BUDGET`` tokens each,
counted with the project's cl100k tokenizer (OpenAI's embedding models' own); a text over
``MAX_INPUT_TOKENS`` is cut to fit, as the endpoint would refuse it whole.

Failures: the SDK's own retries are off. A 429, a 5xx, a timeout or an unreachable endpoint raises
``TransientEmbedderError`` (carrying the endpoint's ``Retry-After``), which the task layer retries with backoff,
so no worker thread sleeps waiting for an endpoint. A refused key, an unknown model, or an answer that fails the
checks below raises ``EmbedderError``: a retry would fail the same way. The API key is never logged nor put in
an error message.

Answers are checked in full before any vector leaves this module (``EmbeddingsAnswer``, parsed from the raw
body): one row per text sent, indices exactly a permutation of 0..n-1 (a proxy that splits and re-joins
batches may answer 0,1,0,1: those vectors would belong to other texts), one length in 1..65,536 equal to the
configured ``MEMORY_EMBEDDER__DIMENSIONS`` or to the first answer's, finite values, no all-zero vector. An
answer that fails any check is refused whole; nothing of it is stored or cached.

The model an answer names must be the configured one. Names are compared case-insensitively, without a
``:latest`` tag, and a name may carry leading path segments the other lacks: ``BAAI/bge-small-en`` or
``/models/BAAI/bge-small-en`` answers for ``bge-small-en`` (an org, a server's model directory), while
``intfloat/bge-small-en`` does not answer for ``BAAI/bge-small-en``, nor ``nomic-embed-text:v1.5`` for
``nomic-embed-text``. The first answer's name is then held: every later answer must name the same model (a
server swapped behind its URL, at the same dimension, is refused instead of mixed into the store). An answer
that names no model is not compared. Azure OpenAI (a host under ``.azure.com``) is asked for a deployment,
named by its owner, and answers with its model's name: there the first answer's name is taken and held.

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
from collections import Counter
from collections.abc import Mapping, Sequence
from email.utils import parsedate_to_datetime
from typing import Any, Self
from urllib.parse import urlsplit

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidatorFunctionWrapHandler, field_validator

from memory_core.core.errors import ConfigurationError, EmbedderError, TransientEmbedderError
from memory_core.core.metrics import MODEL_TOKENS
from memory_core.core.settings import EmbedderSettings
from memory_core.core.tokens import TokenCounter, default_counter
from memory_core.engine.embedders.base import MAX_DIMENSION, EmbedderFingerprint, UsageHook
from memory_core.engine.embedders.roles import roles_of

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


_AZURE = ".azure.com"
"""Hosts under this domain serve deployments named by their owner: the first answer's model name is taken."""
_SHOWN = 16
"""Indices an error message lists before it cuts the list short."""


class _Row(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    index: int
    embedding: list[float]


class _Usage(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    prompt_tokens: int | None = Field(default=None, ge=0)
    total_tokens: int | None = Field(default=None, ge=0)

    @property
    def tokens(self) -> int:
        """The tokens the endpoint reports the request used; 0 when it reports none."""
        return self.prompt_tokens or self.total_tokens or 0


class EmbeddingsAnswer(BaseModel):
    """The body of an embeddings endpoint's answer, as far as memory-core reads it (other fields are ignored).

    Strict: an index that is not an integer, or a vector value that is not a number, fails the whole answer.
    ``vectors`` checks that the answer is one for the texts sent.
    """

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    data: list[_Row]
    model: str | None = None
    """The model the endpoint says answered; None or ``""`` when it names none."""
    usage: _Usage | None = None

    @field_validator("usage", mode="wrap")
    @classmethod
    def _usage_or_none(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> _Usage | None:
        # An odd usage report is no reason to refuse the vectors: our own token count stands in for it.
        try:
            usage: _Usage | None = handler(value)
        except ValidationError:
            return None
        return usage

    @classmethod
    def parse(cls, body: bytes, where: str) -> Self:
        """The answer in ``body``; ``EmbedderError`` naming the first problem when it is not an embeddings answer.
        ``where`` names the endpoint for the message."""
        try:
            return cls.model_validate_json(body)
        except ValidationError as exc:
            first = exc.errors(include_input=False, include_url=False)[0]
            field = ".".join(str(part) for part in first["loc"]) or "the body"
            raise EmbedderError(
                f"{where} sent an answer that is not an embeddings response ({field}: {first['msg']}); "
                "nothing was stored"
            ) from None

    def vectors(self, texts: int, where: str) -> np.ndarray[Any, np.dtype[np.float64]]:
        """The vectors as sent (not normalized), row ``i`` for text ``i``, once the answer is checked to be one
        for ``texts`` texts: one row per text, indices each of 0..texts-1 once, one length in 1..65,536, finite
        values, none all zero. Anything else raises ``EmbedderError`` naming what was wrong."""
        rows = self.data
        if len(rows) != texts:
            raise EmbedderError(
                f"{where} answered {len(rows)} embeddings for {_texts(texts)}; expected one per text; nothing was "
                "stored"
            )
        indices = [row.index for row in rows]
        if sorted(indices) != list(range(texts)):
            raise EmbedderError(_index_problem(indices, texts, where))
        lengths = sorted({len(row.embedding) for row in rows})
        if len(lengths) > 1:
            raise EmbedderError(
                f"{where} sent vectors of {lengths} dimensions in one answer; expected one length; nothing was stored"
            )
        dimension = lengths[0]
        if not 1 <= dimension <= MAX_DIMENSION:
            raise EmbedderError(
                f"{where} sent vectors of {dimension:,} dimensions, which no store holds (1 to {MAX_DIMENSION:,}); "
                "nothing was stored: set MEMORY_EMBEDDER__DIMENSIONS to a length this model can shorten its vectors "
                "to, or MEMORY_EMBEDDER__MODEL to another model"
            )
        matrix = np.empty((texts, dimension), dtype=np.float64)
        for row in rows:
            matrix[row.index] = row.embedding
        finite = np.isfinite(matrix).all(axis=1)
        if not finite.all():
            raise EmbedderError(
                f"{where} sent a vector with a non-finite value (NaN or infinity) for text {int(np.argmin(finite))} "
                f"of {_texts(texts)}; nothing was stored"
            )
        norms = np.linalg.norm(matrix, axis=1)
        unusable = (norms == 0) | ~np.isfinite(norms)
        if unusable.any():
            raise EmbedderError(
                f"{where} sent an all-zero (or overflowing) vector for text {int(np.argmax(unusable))} of "
                f"{_texts(texts)}, which has no direction to compare; nothing was stored"
            )
        return matrix


def same_model(answered: str, configured: str) -> bool:
    """Whether an endpoint that answers as model ``answered`` serves the ``configured`` one: equal ignoring case
    and a ``:latest`` tag, where one name may carry leading path segments the other lacks (an org, a model
    directory), but never different ones."""
    theirs, ours = _segments(answered), _segments(configured)
    if not theirs or not ours:
        return False
    shorter, longer = sorted((theirs, ours), key=len)
    return longer[len(longer) - len(shorter) :] == shorter


def _canonical(name: str) -> str:
    return name.strip().lower().removesuffix(":latest")


def _segments(name: str) -> list[str]:
    return [part for part in _canonical(name).split("/") if part]


def _texts(count: int) -> str:
    return f"{count} text" if count == 1 else f"{count} texts"


def _shown(values: Sequence[int]) -> str:
    if len(values) <= _SHOWN:
        return str(list(values))
    return f"[{', '.join(map(str, values[:_SHOWN]))}, ...] ({len(values)} in all)"


def _index_problem(indices: list[int], texts: int, where: str) -> str:
    """One line: the indices answered, and which are repeated, missing or out of range."""
    counts = Counter(indices)
    problems = {
        "repeated": sorted(index for index, seen in counts.items() if seen > 1),
        "missing": sorted(set(range(texts)) - counts.keys()),
        "out of range": sorted(index for index in counts if not 0 <= index < texts),
    }
    details = "; ".join(f"{name}: {_shown(values)}" for name, values in problems.items() if values)
    expected = "index 0" if texts == 1 else f"each of 0..{texts - 1} once"
    return (
        f"{where} answered indices {_shown(indices)} for {_texts(texts)}; expected {expected} ({details}); "
        "nothing was stored"
    )


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
        self._roles = roles_of(settings)
        self._host = endpoint_host(settings.base_url)
        self._requested_dimensions = settings.dimensions
        self._dimension: int | None = settings.dimensions
        self._answered_model: str | None = None  # the model the first answer named: every later one must too
        self._answered = False  # whether an answer passed the checks (its dimension and model are held)
        self._named_by_owner = self._host.endswith(_AZURE)
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
            **self._roles.fingerprint_fields(),
        )

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed(texts, self._roles.document_prefix, self._roles.document_params)

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        # As ``roles`` says; symmetric models (OpenAI's own) take queries and documents alike.
        return self._embed(texts, self._roles.query_prefix, self._roles.query_params)

    def _embed(self, texts: Sequence[str], prefix: str, params: Mapping[str, Any]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for batch, counted in self._batches([self._fit(prefix + text) for text in texts]):
            vectors.extend(self._request(batch, counted, params))
        return vectors

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

    def _request(self, batch: list[str], counted: int, params: Mapping[str, Any]) -> list[list[float]]:
        openai = self._openai
        extra: dict[str, Any] = {"dimensions": self._requested_dimensions} if self._requested_dimensions else {}
        if params:
            extra["extra_body"] = dict(params)  # the endpoint's own fields (an input type), sent as they are
        where = f"the embeddings endpoint at {self._host} (model {self._model!r})"
        try:
            response = self._client.embeddings.with_raw_response.create(
                model=self._model, input=batch, encoding_format="float", **extra
            )
            body = response.content
        except openai.APITimeoutError as exc:
            raise TransientEmbedderError(
                f"{where} did not answer within {self._timeout:g}s (raise MEMORY_EMBEDDER__TIMEOUT if it is just slow)"
            ) from exc
        except openai.APIConnectionError as exc:
            raise TransientEmbedderError(
                f"{where} cannot be reached ({type(exc.__cause__ or exc).__name__}): check MEMORY_EMBEDDER__BASE_URL "
                f"and the network"
            ) from exc
        # An error status is raised "from None": the SDK's exception quotes the endpoint's body, which may echo the
        # key (some servers' 401s quote it whole) or the texts, and a chained cause is printed with every
        # traceback that logs ours. Ours names the status and the endpoint's error code instead.
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise EmbedderError(
                f"{where} refused the API key (HTTP {exc.status_code}); set MEMORY_EMBEDDER__API_KEY to a key "
                f"it accepts for this model"
            ) from None
        except openai.APIStatusError as exc:
            status = exc.status_code
            if status == 429 or status >= 500:
                wait = _retry_after(exc.response.headers)
                after = f"; it asks for a retry after {wait:g}s" if wait is not None else ""
                raise TransientEmbedderError(
                    f"{where} is {'rate-limiting' if status == 429 else 'failing'} (HTTP {status}{after})",
                    retry_after=wait,
                ) from None
            if status == 404:
                raise EmbedderError(
                    f"{where} has no model {self._model!r} (HTTP 404); set MEMORY_EMBEDDER__MODEL=openai:<a model "
                    f"it serves> or fix MEMORY_EMBEDDER__BASE_URL"
                ) from None
            raise EmbedderError(f"{where} refused the request (HTTP {status}, {_code(exc)})") from None
        except (openai.OpenAIError, ValueError) as exc:  # an answer the SDK cannot take at all
            raise EmbedderError(
                f"{where} sent an answer that is not an embeddings response ({type(exc).__name__})"
            ) from exc
        answer = EmbeddingsAnswer.parse(body, where)
        matrix = answer.vectors(len(batch), where)
        self._hold(answer.model or None, matrix.shape[1], where)
        tokens = (answer.usage.tokens if answer.usage else 0) or counted  # no usage reported: metered by our count
        MODEL_TOKENS.labels(self.model_name, "embedding").inc(tokens)
        if self.on_usage is not None:
            self.on_usage(self.model_name, tokens, len(batch))
        return [row.tolist() for row in matrix / np.linalg.norm(matrix, axis=1, keepdims=True)]

    def _hold(self, model: str | None, dimension: int, where: str) -> None:
        """Checks an answer's model and vector length against the configured ones and the earlier answers'; the
        first answer that passes sets what every later one must match."""
        with self._lock:
            if model is not None:
                self._check_model(model, where)
            if self._dimension is not None and dimension != self._dimension:
                raise EmbedderError(self._dimension_problem(dimension, where))
            if model is not None and self._answered_model is None:
                self._answered_model = model
            if not self._answered:
                self._answered = True
                self._dimension = dimension
                logger.info(
                    "embeddings endpoint %s serves %s (answering as %s) at %d dimensions",
                    self._host,
                    self._model,
                    model or "an unnamed model",
                    dimension,
                )

    def _check_model(self, model: str, where: str) -> None:
        held = self._answered_model
        if held is not None:
            if _canonical(model) != _canonical(held):
                raise EmbedderError(
                    f"{where} answered as model {model!r}, but its earlier answers, and this store's vectors, are "
                    f"of {held!r}; nothing was stored: the endpoint now serves another model (point it back), or "
                    f"move the store to it with `memory-core reindex --to openai:{model}`"
                )
        elif not same_model(model, self._model) and not self._named_by_owner:
            raise EmbedderError(
                f"{where} answered as model {model!r}, but this store's vectors are of {self._model!r}; nothing was "
                f"stored: point MEMORY_EMBEDDER__BASE_URL back at a server of {self._model!r}, or move the store "
                f"to {model!r} with `memory-core reindex --to openai:{model}` (a new store: set "
                f"MEMORY_EMBEDDER__MODEL='openai:{model}')"
            )

    def _dimension_problem(self, dimension: int, where: str) -> str:
        if not self._answered and self._requested_dimensions is not None:
            return (
                f"{where} sent vectors of [{dimension}] dimensions, expected {self._requested_dimensions}: it "
                f"ignores MEMORY_EMBEDDER__DIMENSIONS={self._requested_dimensions}; nothing was stored: unset "
                f"MEMORY_EMBEDDER__DIMENSIONS (or set it to {dimension}) for this model, or set "
                "MEMORY_EMBEDDER__MODEL to a model that can shorten its vectors"
            )
        return (
            f"{where} sent vectors of [{dimension}] dimensions, expected {self._dimension}; it serves another "
            f"model than the store was filled with (or ignores MEMORY_EMBEDDER__DIMENSIONS): point it back, or "
            f"change the store's embedder with memory-core reindex"
        )


def _code(exc: Any) -> str:
    """The endpoint's error code or type, never its free text (which may quote the input)."""
    body = exc.body if isinstance(getattr(exc, "body", None), dict) else {}
    detail = body.get("error", body) if isinstance(body.get("error", body), dict) else {}
    code = detail.get("code") or detail.get("type") or "no error code"
    return str(code)[:80]
