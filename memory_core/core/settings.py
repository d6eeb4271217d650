"""The one ``Settings`` of memory-core: environment variables with the ``MEMORY_`` prefix.

Nested groups use ``__``: ``MEMORY_REDIS__URL``, ``MEMORY_QDRANT__BACKEND``,
``MEMORY_ANTHROPIC__API_KEY``. Only entry points (``workers/app.py``, ``ops/*``,
test fixtures) call :func:`get_settings`; library classes take a ``Settings``
(or one of its groups) in their constructor and never read the environment.
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict

from memory_core.core.errors import ConfigurationError

logger = logging.getLogger(__name__)


def _blank_is_unset(value: object) -> object:
    # docker-compose passes MEMORY_ANTHROPIC__API_KEY= when no key is given: an empty secret is no secret.
    raw = value.get_secret_value() if isinstance(value, SecretStr) else value
    return None if isinstance(raw, str) and not raw.strip() else value


Secret = Annotated[SecretStr | None, BeforeValidator(_blank_is_unset)]
"""An optional secret; empty or blank counts as unset."""


def _home_expanded(path: Path) -> Path:
    return path.expanduser()


UserPath = Annotated[Path, AfterValidator(_home_expanded)]
"""A path in which a leading ``~`` is the user's home (``MEMORY_QDRANT__PATH=~/memory`` in an ``.env`` file)."""

LEGACY_DATA_DIR = Path(".memory-core")
"""The default data directory of earlier versions: relative to each process's working directory, so a
``memory-core status`` run elsewhere looked at another (empty) store than the worker's."""


def user_data_dir() -> Path:
    """The per-user data directory: ``$XDG_DATA_HOME/memory-core``, else ``~/.local/share/memory-core``.

    The XDG Base Directory rules, as platformdirs applies them on Linux: a relative ``XDG_DATA_HOME`` is
    ignored. The same from every working directory. Without a home directory to expand (a service user
    with none), the earlier default, ``./.memory-core``, is what is left.
    """
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "memory-core"
    try:
        return Path("~").expanduser() / ".local" / "share" / "memory-core"
    except RuntimeError:  # no HOME and no passwd entry
        return LEGACY_DATA_DIR.absolute()


def data_dir() -> Path:
    """Where the data settings (``qdrant.path``, ``stack.run_dir``, ``stack.backup_dir``) default to.

    The per-user directory (:func:`user_data_dir`), except while an earlier version's ``./.memory-core``
    exists in the working directory and the per-user one does not: its store, pid files and backups are
    then used where they are (every setting together, so a worker and ``down`` started there still agree),
    and :func:`load_settings` warns that it should be moved.
    """
    chosen = user_data_dir()
    legacy = LEGACY_DATA_DIR.absolute()
    if legacy.is_dir() and not chosen.exists() and legacy != chosen:
        return legacy
    return chosen


def _in_data_dir(name: str) -> Path:
    return data_dir() / name


def redact_url(url: str) -> str:
    """Returns ``url`` with any password replaced by ``***``, for logs and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        provider, _, rest = url.partition(":")
        if "://" in rest and not rest.startswith("//"):  # a spec around a URL: http:https://user:pass@host
            return f"{provider}:{redact_url(rest)}"
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


class _Group(BaseModel):
    """A settings group: each field's docstring is its description (the Configuration page is built from them)."""

    model_config = ConfigDict(use_attribute_docstrings=True)


class RedisSettings(_Group):
    """Redis: the broker (unless ``celery.broker_url`` is set), the shared L2 cache, and where short-term state,
    sessions, checkpoints, profiles and task replies live."""

    url: str = "redis://localhost:6379/0"
    """The Redis URL (``redis://``, ``rediss://`` for TLS, or ``unix://``); a password in it works and is never
    logged. Also the broker, unless ``MEMORY_CELERY__BROKER_URL`` is set."""
    socket_timeout: float = Field(default=5.0, gt=0)
    """Seconds allowed to connect to Redis and for each reply (caches, state, replies, and the client's broker
    connection), so an unreachable Redis fails a call instead of hanging it."""
    key_prefix: str = Field(default="mc", pattern=r"^[A-Za-z0-9_-]{1,16}$")
    """Prefix of every Redis key: caches, state, sessions, checkpoints and replies under ``<prefix>:``, and on a
    Redis broker the queues and unacked index under ``<prefix>/`` (kombu's ``global_keyprefix``), so
    deployments with different prefixes can share one Redis database without taking each other's tasks.
    Changing it orphans queued tasks and everything kept in Redis: drain the queues first."""

    @field_validator("url")
    @classmethod
    def _redis_scheme(cls, value: str) -> str:
        if urlsplit(value).scheme not in {"redis", "rediss", "unix"}:
            raise ValueError(f"expected a redis://, rediss:// or unix:// URL, got {redact_url(value)!r}")
        return value


class QdrantSettings(_Group):
    """Where vectors live: the embedded Qdrant Edge engine, a Qdrant server, or qdrant-client's local mode."""

    backend: Literal["edge", "server", "local"] = "edge"
    """``edge`` (the embedded Qdrant Edge engine, in ``path``), ``server`` (a Qdrant server at ``url``), or
    ``local`` (qdrant-client's local mode, for tests). One worker process holds the embedded engine: use the
    ``threads`` or ``solo`` pool with it, or ``prefork`` with concurrency 1."""
    path: UserPath = Field(
        default_factory=functools.partial(_in_data_dir, "qdrant"),
        json_schema_extra={"shown_default": "<data dir>/qdrant"},  # for the Configuration page
    )
    """Data directory of the embedded engine (and of ``local`` mode when ``url`` is unset). The data dir is
    ``$XDG_DATA_HOME/memory-core``, else ``~/.local/share/memory-core``: the same from any working directory
    (an earlier version's ``./.memory-core`` is used while the per-user one does not exist; move it there).
    A relative path is taken from the worker's working directory; ``~`` is the home directory."""
    url: str | None = None
    """URL of the Qdrant server (``backend=server``, e.g. ``http://qdrant:6333``), required there. In ``local``
    mode, a location used instead of ``path`` (``:memory:`` or a directory)."""
    api_key: Secret = None
    """API key of the Qdrant server (``backend=server``)."""
    collection_prefix: str = Field(default="memory_core", pattern=r"^[A-Za-z0-9_-]{1,48}$")
    """Start of the collection names: one collection per embedding model and layout
    (``<prefix>_<model>_v3``). Changing it points the workers at new, empty collections; the old ones stay."""
    timeout: float = Field(default=10.0, gt=0)
    """Seconds a request to the Qdrant server may take (``backend=server``; rounded up to whole seconds)."""
    tombstone_ttl: float = Field(default=7 * 24 * 3600.0, gt=0)
    """Seconds a deleted item's tombstone refuses older writes of it (redelivered tasks, replayed dead
    letters). Must exceed ``VISIBILITY_TIMEOUT + MAX_RETRIES x RETRY_BACKOFF_MAX`` (``MEMORY_CELERY__*``) and
    the age of any dead letter you would replay."""
    fault_flag: Path | None = None
    """Fault tests only: while this file exists, every store call fails with ``TransientStoreError``. Leave it
    unset in production."""


EMBEDDER_SPECS = (
    "minilm (the shipped default), fastembed:<model> (e.g. fastembed:BAAI/bge-small-en-v1.5) or openai:<model>"
)
"""The forms ``MEMORY_EMBEDDER__MODEL`` accepts, as error messages name them (``hashing``, for tests, goes unsaid)."""

_FIXED_EMBEDDERS = {
    "all-MiniLM-L6-v2": "all-MiniLM-L6-v2",
    "minilm": "all-MiniLM-L6-v2",
    "minilm:all-MiniLM-L6-v2": "all-MiniLM-L6-v2",
    "hashing": "hashing",
}
"""The specs of one fixed model, each with the spelling it is kept in. ``memory-core status`` names the shipped
model ``minilm:all-MiniLM-L6-v2`` (its fingerprint's provider and model); a store recorded its collection and
spec as ``all-MiniLM-L6-v2`` before, so every spelling of it is kept as that."""
_EMBEDDER_PROVIDERS = ("fastembed", "openai")


def _did_you_mean(spec: str | None) -> str:
    return "" if spec is None else f"; did you mean {redact_url(spec)!r}?"


def embedder_spec(value: str) -> str:
    """``value`` as a ``MEMORY_EMBEDDER__MODEL`` spec, in the spelling the workers keep (``minilm`` is kept as
    ``all-MiniLM-L6-v2``).

    Raises ``ValueError`` (pydantic's, so a setting's error shows its message alone) naming the accepted forms
    and, for a near miss, the spec probably meant.
    """
    fixed = _FIXED_EMBEDDERS.get(value)
    if fixed is not None:
        return fixed
    provider, _, name = value.partition(":")
    if provider in _EMBEDDER_PROVIDERS and name and not any(c.isspace() for c in name):
        return value
    if provider in _EMBEDDER_PROVIDERS and not name.strip():
        raise PydanticCustomError("embedder_spec", f"{provider}: needs a model name; expected {EMBEDDER_SPECS}")
    raise PydanticCustomError("embedder_spec", f"expected {EMBEDDER_SPECS}{_did_you_mean(_embedder_near_miss(value))}")


def _embedder_near_miss(value: str) -> str | None:
    """The spec a mistyped one probably meant: another case or spacing, a misspelt provider, a model without its
    provider (or after a ``/``), the shipped model by its full name."""
    typed = value.strip()
    lowered = typed.lower()
    if lowered in ("minilm", "hashing"):
        return lowered
    if lowered.endswith(("minilm-l6-v2", "minilm")):  # all-minilm-l6-v2, sentence-transformers/all-MiniLM-L6-v2
        return "minilm"
    if any(c.isspace() for c in typed):
        return None
    if lowered.startswith("text-embedding-"):  # OpenAI's models
        return f"openai:{typed}"
    for separator in (":", "/"):
        provider, found, name = typed.partition(separator)
        close = difflib.get_close_matches(provider.lower(), _EMBEDDER_PROVIDERS, n=1, cutoff=0.6)
        if found and name and close:
            return f"{close[0]}:{name}"
    if "/" in typed and ":" not in typed:  # a model as fastembed and Hugging Face name it: BAAI/bge-small-en-v1.5
        return f"fastembed:{typed}"
    close = difflib.get_close_matches(lowered, ("minilm", "all-minilm-l6-v2", "hashing"), n=1, cutoff=0.7)
    return None if not close else "hashing" if close[0] == "hashing" else "minilm"


def _http_url_problem(value: str, example: str) -> str | None:
    """What keeps ``value`` from being an http(s) URL with a host (None: nothing), and the URL probably meant."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  # parsing the port is what refuses a port that is no number
    except ValueError as exc:
        return f"expected an http:// or https:// URL, e.g. {example}; {exc}"
    if parts.scheme in {"http", "https"} and parts.hostname:
        return None
    meant = None
    if "://" not in value:  # localhost:8080/v1: the scheme was left out
        candidate = "http://" + value.lstrip("/")
        meant = candidate if _http_url_problem(candidate, example) is None else None
    return f"expected an http:// or https:// URL, e.g. {example}{_did_you_mean(meant)}"


def _http_base_url(value: str | None) -> str | None:
    # Checked here: without a scheme the URL parsed as a path, and the first request failed naming an empty host.
    if value is None or not value.strip():  # docker-compose passes VAR= for an unset one
        return None
    problem = _http_url_problem(value, "http://localhost:8080/v1")
    if problem is not None:
        raise PydanticCustomError("base_url", problem)
    return value


BaseUrl = Annotated[str | None, AfterValidator(_http_base_url)]
"""An optional endpoint's base URL: http:// or https:// with a host; empty or blank counts as unset."""


_REQUEST_FIELDS = frozenset({"input", "model", "dimensions", "encoding_format", "user"})
"""The fields of an OpenAI embeddings request that memory-core sets itself."""


class EmbedderSettings(_Group):
    """The embedding model the workers run. ``hashing`` is for unit tests and must be chosen explicitly."""

    model: Annotated[str, AfterValidator(embedder_spec)] = "all-MiniLM-L6-v2"
    """Which embedder: ``minilm`` (the default, also spelt ``all-MiniLM-L6-v2``: ONNX, 384 dimensions, shipped,
    offline), ``fastembed:<name>`` (any model the fastembed library lists, extra ``[fastembed]``; downloaded
    once into ``cache_dir``, or loaded from ``path``), ``openai:<model>`` (any OpenAI-compatible
    ``/v1/embeddings`` endpoint, extra ``[openai]``), or ``hashing``, which exists for tests only (it knows no
    meaning). A store keeps the fingerprint of the embedder that filled it: a worker whose embedder differs
    refuses to start."""
    path: UserPath | None = None
    """A local model directory to load instead of downloading (``fastembed:``), for machines without a
    network."""
    cache_dir: UserPath = Field(
        default_factory=functools.partial(_in_data_dir, "models"),
        json_schema_extra={"shown_default": "<data dir>/models"},  # for the Configuration page
    )
    """Where downloaded models are kept (``fastembed:``); never a temporary directory, which gets wiped."""
    base_url: BaseUrl = None
    """The embeddings endpoint's base URL (``openai:``), e.g. ``http://localhost:11434/v1``; unset: OpenAI's."""
    api_key: Secret = None
    """The embeddings endpoint's API key (``openai:``); never logged, never in a task message."""
    dimensions: int | None = Field(default=None, ge=1, le=65536)
    """The vector length to ask the endpoint for (``openai:`` models that can shorten their vectors), or of
    ``hashing``'s vectors; unset: the model's own (384 for ``hashing``)."""
    roles: Literal["e5", "nomic", "bge", "input-type", "voyage", "cohere", "jina"] | None = None
    """How the model tells a search query from a document, for a model used through ``openai:`` (or to replace a
    ``fastembed:`` model's own table): ``e5`` (``query: `` / ``passage: `` prefixes), ``nomic``
    (``search_query: `` / ``search_document: ``), ``bge`` (the query instruction), ``input-type`` (an
    ``input_type`` field query / passage: NVIDIA NIM and servers of its shape), ``voyage`` (``input_type`` query /
    document), ``cohere`` (search_query / search_document), ``jina`` (``task`` retrieval.query / passage).
    Unset: queries and documents are sent alike. Part of the store's fingerprint (a change is a reindex)."""
    query_prefix: str | None = Field(default=None, max_length=200)
    """The text put before each search query (over ``roles``'); ``""``: none."""
    document_prefix: str | None = Field(default=None, max_length=200)
    """The text put before each item embedded for the store (over ``roles``'); ``""``: none."""
    query_params: dict[str, StrictStr | StrictInt | StrictFloat | StrictBool] | None = None
    """Extra fields of an embeddings request for search queries (``openai:``), JSON, e.g.
    ``{"input_type": "query"}`` (over ``roles``')."""
    document_params: dict[str, StrictStr | StrictInt | StrictFloat | StrictBool] | None = None
    """Extra fields of an embeddings request for items (``openai:``), e.g. ``{"input_type": "passage"}``."""

    @field_validator("query_params", "document_params")
    @classmethod
    def _own_fields_only(
        cls, value: dict[str, str | int | float | bool] | None
    ) -> dict[str, str | int | float | bool] | None:
        taken = sorted(set(value or {}) & _REQUEST_FIELDS)
        if taken:
            raise ValueError(
                f"{taken} are fields memory-core sets in every embeddings request itself; give only the endpoint's "
                'extra fields (e.g. {"input_type": "query"}), and the vector length in MEMORY_EMBEDDER__DIMENSIONS'
            )
        return value

    timeout: float = Field(default=30.0, gt=0, le=600)
    """Seconds one request to a remote embeddings endpoint may take (``openai:``)."""
    threads: int = Field(default=1, ge=1, le=64)
    """onnxruntime intra-op threads per embedder call (1 is best on a busy worker)."""
    batch_size: int = Field(default=32, ge=1, le=1024)
    """Texts per model run, for texts of a typical 32 tokens: the local models (MiniLM, ``fastembed:``) run a
    call's texts ordered by length, in batches of at most this times 32 tokens once padded (many short texts
    or a few long ones); requests to ``openai:`` endpoints hold at most this many texts."""
    max_tokens: int = Field(default=256, ge=8, le=512)
    """Tokens of a text that are embedded; the rest of a longer text does not count in its vector."""
    outage_retry: float = Field(default=5.0, gt=0, le=24 * 60)
    """Minutes a write (an add, an import, a compaction, a reindex batch) keeps retrying while the embeddings
    endpoint is unavailable (``openai:``: 429, 5xx, a timeout, unreachable) before it is dead-lettered: with
    backoff up to ``MEMORY_CELERY__RETRY_BACKOFF_MAX`` between tries, and no sooner than the endpoint's
    Retry-After (up to that cap). A waiting caller is told, after the usual retries (``MEMORY_CELERY__MAX_RETRIES``) or
    ``RETRY_BACKOFF_MAX`` seconds, that the write is kept and until when it goes on retrying. Searches are not held
    this long: they fail after the usual retries."""


RERANK_SPECS = "'' (off), fastembed:<cross-encoder name> or http:<URL of a /rerank endpoint>"
"""The forms ``MEMORY_RERANK__MODEL`` accepts, as error messages name them."""


class RerankSettings(_Group):
    """Optional reranking of search results by a cross-encoder (off by default): the workers score the top
    ``candidates`` fused hits against the query in one batch and return the best ``limit``. Published results
    on conversational memory go both ways, so measure it on your data (``ops/eval --rerank``) first."""

    model: str = ""
    """Which reranker: ``""`` (off, the default), ``fastembed:<name>`` (a cross-encoder the fastembed library
    lists, e.g. ``fastembed:Xenova/ms-marco-MiniLM-L-6-v2``, extra ``[fastembed]``; downloaded once into
    ``MEMORY_EMBEDDER__CACHE_DIR``, or loaded from ``path``), or ``http:<url>`` (a rerank endpoint of the
    Cohere, Jina or Hugging Face TEI shape, e.g. ``http:http://localhost:8080/rerank``). A worker that cannot
    load it refuses to start."""
    candidates: int = Field(default=30, ge=1, le=200)
    """Fused hits a reranked search scores (at least its ``limit``): more can find a lower-ranked fact, and
    cost the reranker time in proportion."""
    timeout: float = Field(default=10.0, gt=0, le=600)
    """Seconds one request to a rerank endpoint may take (``http:``); past it the search fails with
    ``TransientRerankerError``."""
    api_key: Secret = None
    """The rerank endpoint's API key, sent as a bearer token (``http:``); never logged, never in a task
    message."""
    remote_model: str = Field(default="", max_length=200)
    """The model name sent to the rerank endpoint (``http:``), which Cohere's and Jina's APIs require (e.g.
    ``rerank-v3.5``); unset for a server of one model (TEI)."""
    path: UserPath | None = None
    """A local cross-encoder directory to load instead of downloading (``fastembed:``), for machines without
    a network."""

    @field_validator("model")
    @classmethod
    def _spec(cls, value: str) -> str:
        provider, _, rest = value.partition(":")
        if value == "" or (provider == "fastembed" and rest and not any(c.isspace() for c in rest)):
            return value
        if provider == "http" and _http_url_problem(rest, "") is None:
            return value
        # The value itself is shown by whoever reports the error (load_settings: "(got ...)").
        url = _rerank_url_meant(value)
        if url is not None:
            raise PydanticCustomError(
                "rerank_spec",
                f"expected {RERANK_SPECS}: an endpoint's URL follows the http: that names the provider"
                f"{_did_you_mean(url)}",
            )
        if provider == "fastembed" and not rest.strip():
            raise PydanticCustomError(
                "rerank_spec", f"fastembed: needs a cross-encoder's name; expected {RERANK_SPECS}"
            )
        misspelt = provider != "fastembed" and difflib.get_close_matches(provider.lower(), ["fastembed"], cutoff=0.6)
        meant = f"fastembed:{rest}" if misspelt and rest and not any(c.isspace() for c in rest) else None
        raise PydanticCustomError("rerank_spec", f"expected {RERANK_SPECS}{_did_you_mean(meant)}")


def _rerank_url_meant(value: str) -> str | None:
    """The ``http:<url>`` spec a rerank spec that holds a URL probably meant: ``http://host/rerank`` (the URL
    alone), ``http:host:8080/rerank`` (the URL without its scheme) or ``host:8080/rerank`` (neither)."""
    typed = value.strip()
    provider, _, rest = typed.partition(":")
    candidates = [typed]
    if provider.lower() == "http":
        candidates.append(rest)
    for candidate in candidates:
        url = candidate if "://" in candidate else "http://" + candidate.lstrip("/")
        if _http_url_problem(url, "") is not None:
            continue
        parts = urlsplit(url)
        # A bare word ("cohere") is no host anyone meant; a name with a dot or a port, or a written URL, is.
        if "://" in candidate or "." in (parts.hostname or "") or parts.hostname == "localhost" or parts.port:
            return f"http:{url}"
    return None


class AnthropicSettings(_Group):
    """Claude: compaction, session summaries and entity extraction use it when an API key is set, and the
    offline extractive summarizer otherwise."""

    api_key: Secret = None
    """The Anthropic API key; unset (or blank), nothing calls a model and the offline summarizer is used (a
    warning says so)."""
    base_url: BaseUrl = None
    """Another Anthropic API endpoint (a gateway or proxy); unset: the SDK's default."""
    timeout: float = Field(default=60.0, gt=0)
    """Seconds one request to the Anthropic API may take."""
    max_retries: int = Field(default=2, ge=0)
    """How many times the SDK retries a failed request (connection errors, rate limits, server errors) before
    the call fails."""


class CompactionSettings(_Group):
    """Compaction: batching to the model's context, locking, and the beat sweep."""

    max_input_tokens: int = Field(default=60_000, ge=500)
    """Tokens (estimated, prompt included) one summarizer call may take: a larger set is folded in several
    batches, oldest first."""
    max_output_tokens: int = Field(default=4_096, ge=64)
    """The most tokens Claude may write in one summary (compaction and session summaries)."""
    lock_ttl: int = Field(default=600, ge=5)
    """Seconds a set's compaction lock lives unless renewed (it is, after each batch), so a crashed worker
    blocks that set's compaction this long at most. A queued compaction also keeps others of the same set from
    being enqueued for up to this long."""
    sweep_interval: float = Field(default=300.0, gt=0)
    """Seconds between compaction sweeps (run by beat), which enqueue a compaction of every set at or over
    capacity, e.g. after a failed run."""
    sweep_max_sets: int = Field(default=10_000, ge=1)
    """The most sets one compaction sweep, and one eviction run, look at."""


class FormationSettings(_Group):
    """Memory formation (``remember``): Claude turns messages into facts on the ``memory.formation`` queue.

    It uses the ``MEMORY_ANTHROPIC__*`` endpoint and key; without a key the user's own turns are kept verbatim.
    """

    model: str = Field(default="claude-haiku-4-5", min_length=1, max_length=200)
    """The Claude model that forms facts (part of every operation id: another model forms the same messages
    anew)."""
    daily_tokens: int | None = Field(default=None, ge=1)
    """Model tokens (input + output) one namespace may spend on formation per UTC day; past it, operations are
    ``deferred`` with their messages kept, and resume the next day or on ``memory-core formation resume``.
    Unset: no budget."""
    max_in_flight: int = Field(default=8, ge=1)
    """Formations of one namespace that may run at once across all workers; more wait on the queue, so one
    tenant cannot hold every formation slot."""
    concurrency: int = Field(default=16, ge=1)
    """Formations one worker process runs at once; more wait on the queue, so model calls never take the
    threads that adds and searches need."""
    candidates: int = Field(default=20, ge=0, le=100)
    """Live facts of the scope, the most similar to the messages, that the model reconciles new facts with."""
    max_messages: int = Field(default=100, ge=1, le=1000)
    """The most messages one ``remember`` call may carry."""
    max_output_tokens: int = Field(default=4_096, ge=256)
    """The most tokens Claude may write in one formation reply."""
    lock_ttl: int = Field(default=300, ge=5)
    """Seconds a scope's formation lock lives (renewed while it works): a killed worker delays that scope's
    next formation this long at most."""
    busy_retry: float = Field(default=2.0, gt=0, le=60)
    """Seconds before a formation that found its scope, namespace or worker busy is tried again."""
    operation_ttl: int = Field(default=7 * 24 * 3600, ge=60)
    """Seconds a finished operation (its stored reply and decisions) is kept: a redelivery or repeated call
    within it replays the decisions without calling the model. Pending, deferred and failed operations are
    kept until they finish or are erased."""
    resume_interval: float = Field(default=300.0, gt=0)
    """Seconds between beat's checks for deferred operations whose namespace has budget again."""


class CacheSettings(_Group):
    """The client's L1 (per process) over L2 (Redis), and the workers' embedding cache."""

    enabled: bool = True
    """Caches item reads and search results in the client (L1 and L2, invalidated by every change of their set)
    and embeddings in the workers. Set definitions are cached either way."""
    l1_max_entries: int = Field(default=10_000, ge=0)
    """The most entries of a client process's in-memory (L1) cache; 0 turns L1 off."""
    l1_max_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    """The most bytes (keys and values) of a client process's L1 cache; a larger entry is not kept in L1."""
    l1_ttl: float = Field(default=30.0, ge=0)
    """Seconds an entry stays in L1; 0 turns L1 off."""
    l2_ttl: int = Field(default=300, ge=1)
    """Seconds an entry of the shared Redis (L2) cache lives."""
    embedding_ttl: int = Field(default=86_400, ge=1)
    """Seconds a worker keeps the embedding of a query or recall candidate in Redis, so a repeated text is not
    embedded again."""
    write_embedding_ttl: int = Field(default=3_600, ge=1)
    """Seconds the embeddings of texts being written (adds, imports) stay cached: long enough for a retry or a
    repeated text, while a day of them would hold ~2.7 KB of Redis per item written."""


class MaintenanceSettings(_Group):
    """Beat's schedule (seconds between runs) and how much one run may do."""

    ttl_sweep_interval: float = Field(default=60.0, gt=0)
    """Seconds between TTL sweeps, which delete expired, unpinned items (invisible to reads since they
    expired)."""
    flush_access_interval: float = Field(default=30.0, gt=0)
    """Seconds between flushes of the read times recorded in Redis to the items' ``last_accessed_time`` in the
    store, which LRU eviction goes by."""
    evict_interval: float = Field(default=120.0, gt=0)
    """Seconds between eviction runs, which bring every set with an eviction policy down to its ``max_items``
    (pinned items stay)."""
    optimize_interval: float = Field(default=600.0, gt=0)
    """Seconds between builds of the HNSW index over new points (embedded engine; a no-op on a server):
    filtered search over a big set needs it."""
    max_items_per_run: int = Field(default=10_000, ge=1)
    """The most items one TTL sweep or eviction run deletes, and about the most read times one flush writes;
    the rest wait for the next run."""


class ReindexSettings(_Group):
    """``memory-core reindex``: how the workers re-embed a store for another embedder."""

    batch_size: int = Field(default=256, ge=1, le=10_000)
    """Points one reindex task copies (each re-embedded in one embedder call); the unit of progress that a
    killed worker redoes."""
    lock_ttl: int = Field(default=60, ge=5, le=3600)
    """Seconds a part's lock lives unless renewed: a killed worker holds its part of the store this long at
    most before another worker takes it over."""
    refresh: float = Field(default=2.0, gt=0, le=60)
    """Seconds a worker trusts what it last read of the reindex (whether to mirror writes into the new
    collection); another worker's start or abort reaches it within this."""
    duty: float = Field(default=0.5, gt=0, le=1)
    """The share of a worker's time a reindex's copy may take: after a batch that took t seconds the part waits
    t x (1 - duty) / duty before its next (1: no pause). Lower keeps live adds and searches faster during a
    reindex and makes it take longer (``ops/bench --reindex`` prints both)."""
    api_key: SecretStr | None = None
    """The API key of a reindex's target, when it needs another than ``MEMORY_EMBEDDER__API_KEY`` (a store
    moving live between two providers). Set it on every worker that runs the reindex; after the switch it
    becomes their ``MEMORY_EMBEDDER__API_KEY``."""
    retry_max: float = Field(default=60.0, ge=1, le=3600)
    """Seconds, the longest wait between a part's tries while the new model's endpoint fails (exponential
    backoff from 1 s): the reindex waits for it, it never gives up nor piles up messages."""


class RedactionSettings(_Group):
    """Optional redaction of personal data in the worker, before embedding and storage (off by default). It
    covers long-term items; short-term state, session history and checkpoints go to Redis as written."""

    enabled: bool = False
    """Replaces personal data in item values, chat message contents and string metadata values with typed
    placeholders (``[EMAIL]``, ``[PHONE]``, ``[CARD]``) before they are embedded or stored; the original is
    not kept."""
    kinds: list[Literal["email", "phone", "card"]] = ["email", "phone", "card"]
    """The recognizers to run: ``email`` (addresses), ``phone`` (7 to 15 digits, not dates), ``card`` (13 to
    19 digits passing the Luhn check)."""


class LimitsSettings(_Group):
    """What one call may carry; checked in the client before anything is enqueued, and again in the worker."""

    max_items_per_call: int = Field(default=1000, ge=1, le=100_000)
    """The most items one ``add`` may carry."""
    max_value_chars: int = Field(default=32_000, ge=1)
    """The most characters of one item value or chat message content (long-term items and session messages);
    a checkpoint may be four times this many bytes."""
    max_metadata_bytes: int = Field(default=16_384, ge=2)
    """The most bytes of an item's metadata as JSON (UTF-8); also bounds a profile and a checkpoint's
    metadata."""
    max_metadata_depth: int = Field(default=5, ge=1)
    """How many levels of objects and lists metadata may nest (the metadata object itself is level 1)."""
    max_query_chars: int = Field(default=4_000, ge=1)
    """The most characters of a search or recall query."""
    max_search_limit: int = Field(default=100, ge=1)
    """The largest ``limit`` a search or recall may ask for."""


class NamespaceQuota(_Group):
    """One namespace's capacity limits; 0 means unlimited."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    items: int = Field(default=0, ge=0)
    """The most long-term items the namespace may hold, across its keys and sets; 0: unlimited."""
    bytes: int = Field(default=0, ge=0)
    """The most bytes of long-term item values and metadata (as JSON, UTF-8) the namespace may hold; 0:
    unlimited. Measuring it reads the namespace's items every ``recount_interval``."""
    writes_per_second: float = Field(default=0.0, ge=0)
    """The sustained rate of long-term items the namespace may add, per second (a token bucket shared by
    every worker); 0: unlimited."""
    burst: int = Field(default=0, ge=0)
    """Items the namespace may add at once above ``writes_per_second`` (the bucket's size); 0: one second's
    worth, and at least one call's ``max_items_per_call``."""

    @property
    def limited(self) -> bool:
        """Whether any limit is set."""
        return bool(self.items or self.bytes or self.writes_per_second)


class QuotaSettings(NamespaceQuota):
    """Per-namespace capacity limits, enforced by the worker on every ``add`` (``QuotaExceeded``).

    The limits here apply to every namespace; ``namespaces`` replaces them for the namespaces it names,
    e.g. ``MEMORY_QUOTAS__NAMESPACES='{"tenant-a": {"items": 100000}}'``.
    """

    namespaces: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,128}$")], NamespaceQuota] = {}
    """Limits that replace the defaults above for the namespaces named (as a JSON object)."""
    recount_interval: float = Field(default=300.0, gt=0)
    """Seconds a namespace's measured usage (items, bytes) is trusted; between counts every add is added to
    it and nothing is subtracted, so a delete frees room at the next count."""

    def for_namespace(self, namespace: str) -> NamespaceQuota:
        """The limits of ``namespace``: its own when ``namespaces`` names it, else the defaults."""
        own = self.namespaces.get(namespace)
        if own is not None:
            return own
        return NamespaceQuota(
            items=self.items, bytes=self.bytes, writes_per_second=self.writes_per_second, burst=self.burst
        )

    @property
    def active(self) -> bool:
        """Whether any namespace has a limit (when none has, the worker does no quota work at all)."""
        return self.limited or any(quota.limited for quota in self.namespaces.values())


class ShortTermSettings(_Group):
    """Short-term and sensory state, kept in Redis per run: how long it lives and how large one value may be."""

    ttl: int = Field(default=86_400, ge=0)
    """Seconds a short-term or sensory state object lives after its last ``persist()``, unless the call gives
    its own ``ttl``; 0: no expiry."""
    max_value_bytes: int = Field(default=1_048_576, ge=1, le=512 * 1_048_576)
    """The largest value one path may hold, in bytes as stored (JSON): Redis answers every read of the state
    with the whole hash, so one huge value slows every reader of it."""


class SessionSettings(_Group):
    """Session memory: history length and TTL in Redis, and the long-term set sessions are promoted into."""

    ttl: int = Field(default=7 * 86_400, ge=0)
    """Seconds a session lives in Redis after its last write (every write renews it), unless
    ``client.session()`` gives its own ``ttl``; 0: no expiry."""
    max_messages: int = Field(default=1_000, ge=2)
    """The most messages a session's history keeps in Redis (the oldest are trimmed), unless
    ``client.session()`` gives its own ``max_messages``."""
    promotion_set: str = Field(default="sessions", pattern=r"^[A-Za-z0-9_.-]{1,128}$")
    """The long-term set of the session's key that its messages and summaries are promoted into, unless
    ``client.session()`` names another."""
    promotion_capacity: int = Field(default=10_000, ge=1)
    """Capacity (items, compacted into summaries past it) of the sets a session creates: its promotion set and
    the vector strategy's. For new sets only: a set made under another value keeps its own capacity."""
    summary_model: str = Field(default="claude-haiku-4-5", min_length=1)
    """The Claude model that folds session messages into the summary (unless the request names another) and
    extracts entities; used only when ``MEMORY_ANTHROPIC__API_KEY`` is set."""


class RecallSettings(_Group):
    """How recall scores candidates from every tier: a weighted sum, then near-duplicates removed. The worker
    scores; the client gathers the short-term and session candidates."""

    relevance_weight: float = Field(default=0.7, ge=0)
    """Weight of relevance in the score: the cosine of query and candidate, from 0 to 1 (see ``context_messages``)."""
    recency_weight: float = Field(default=0.2, ge=0)
    """Weight of recency in the score: 1 for a new candidate, halving every ``half_life_hours``."""
    importance_weight: float = Field(default=0.1, ge=0)
    """Weight of importance in the score: the item's importance, 0.5 unless set."""
    half_life_hours: float = Field(default=72.0, gt=0)
    """Hours in which a candidate's recency halves; the live short-term state counts as new."""
    dedup_threshold: float = Field(default=0.92, gt=0, le=1)
    """Cosine at which two candidates are one fact: the better one is kept, and the other's tier noted in its
    ``also_in``."""
    session_messages: int = Field(default=20, ge=0)
    """The newest messages of the session taken as candidates, when a recall names one."""
    context_messages: int = Field(default=4, ge=0, le=20)
    """The session's newest messages that a recall naming a session reads its query with: each long-term set
    is also searched (dense) with their mean vector, and the relevance of every candidate other than these messages blends in how
    close it is to the nearest of them (``context_weight``). "Plan Friday dinner" then finds the allergy the
    conversation just mentioned. 0 reads the query alone."""
    context_weight: float = Field(default=0.4, ge=0, le=1)
    """The share of relevance that comes from the conversation when a recall names a session:
    ``(1 - w) * cosine(query) + w * max(cosine(message))`` over the ``context_messages``. At 0.4 a candidate
    close to the query still outranks one that only the conversation points to, unless the query is vague."""
    per_set: int = Field(default=20, ge=1, le=100)
    """Hits taken from each long-term set of the key (hybrid search)."""
    max_candidates: int = Field(default=200, ge=1)
    """The most short-term and session candidates the client sends to the worker (short-term state first)."""


class ProfileSettings(_Group):
    """User profiles: the long-term set each profile is re-embedded into (one per user, the user being the key)."""

    set_name: str = Field(default="profile", pattern=r"^[A-Za-z0-9_.-]{1,128}$")
    """The long-term set of each user's key that holds the profile document, where search and recall find it
    and Redis is refilled from. Changing it strands the profiles stored under the old name."""


class McpSettings(_Group):
    """``memory-core mcp``: the MCP server's scope and where it listens with ``--http``."""

    namespace: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,128}$")
    """The namespace every tool acts on over stdio (and with ``--http --dev``). Over HTTP with
    ``MEMORY_AUTH__TOKENS``, the namespace is the one the caller's bearer token grants instead."""
    key: str = Field(default="default", pattern=r"^[A-Za-z0-9_.-]{1,128}$")
    """The key (user, agent) inside the namespace that the tools read and write; no tool can change it."""
    set_name: str = Field(default="memories", pattern=r"^[A-Za-z0-9_.-]{1,128}$")
    """The long-term set tools use when they are given none; created on the first ``add_memory``."""
    set_capacity: int = Field(default=1_000, ge=1)
    """Capacity of that set when the server creates it (items, compacted into summaries past it)."""
    address: str = "127.0.0.1"
    """Where ``memory-core mcp --http`` listens."""
    port: int = Field(default=8765, ge=1, le=65535)
    """The port of ``memory-core mcp --http``; the endpoint is ``/mcp``."""


class ConsoleSettings(_Group):
    """The memory console at ``/ui`` of ``memory-core serve``: who signs in, who may correct, how long a session
    lasts."""

    enabled: bool = True
    """Serve the console at ``/ui`` beside the HTTP API."""
    operator_tokens: Secret = None
    """A JSON list of tokens that sign in as the operator: every namespace (read through each namespace's own
    token of ``MEMORY_AUTH__TOKENS``), the workers, queues and dead letters. Unset: no operator sign-in."""
    corrections: Literal["off", "operators", "all"] = "off"
    """Who may correct memories in the console (edit, pin, importance, TTL, delete, dead letters): nobody,
    operators only, or every signed-in token in its namespace. ``memory-core serve --dev`` allows them."""
    session_ttl: int = Field(default=8 * 3600, ge=60, le=30 * 24 * 3600)
    """Seconds a console sign-in lasts; signing out ends it sooner."""
    secret_key: Secret = None
    """The key that signs session cookies. Unset: derived from ``MEMORY_AUTH__TOKENS`` (the same on every
    replica; changing the tokens signs everyone out), or made at start-up with ``--dev``."""
    sign_in_failures: int = Field(default=5, ge=1)
    """Failed sign-ins from one address within ten minutes before each further attempt must wait (doubling
    from one second)."""

    @field_validator("operator_tokens")
    @classmethod
    def _token_list(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            try:
                raw = json.loads(value.get_secret_value())
            except ValueError:
                raw = None
            if not isinstance(raw, list) or not all(isinstance(t, str) and t for t in raw):
                raise ValueError('expected a JSON list of tokens, like ["op-token"] (not shown)')
        return value


class CheckpointSettings(_Group):
    """Agent checkpoints, kept in Redis per thread and checkpoint namespace: how long and how many."""

    ttl: int = Field(default=30 * 86_400, ge=0)
    """Seconds a thread's checkpoints live after its last ``put``; 0: no expiry."""
    max_per_thread: int = Field(default=1_000, ge=1)
    """The most checkpoints kept per thread and checkpoint namespace; past it the oldest are deleted."""


class BatchingSettings(_Group):
    """Worker-side micro-batching of writes: adds arriving as many small tasks are embedded together."""

    enabled: bool = True
    """Embeds the items of concurrent ``add`` tasks in one embedder call; off, each task embeds its own."""
    max_items: int = Field(default=64, ge=1, le=4096)
    """Items at which a batch stops collecting (a request is never split, so a batch may end a little over)."""
    max_wait_ms: float = Field(default=50.0, ge=0, le=1000)
    """Milliseconds a small batch waits for more while another batch thread is busy (never when the worker is
    idle, so batching adds no latency there)."""
    threads: int = Field(default=0, ge=0, le=64)
    """Batch threads per worker process; 0: one per CPU core."""


class CelerySettings(_Group):
    """The task layer: broker, delivery, retries and the worker pool."""

    broker_url: str | None = None
    """The Celery broker, when it is not ``MEMORY_REDIS__URL`` (e.g. ``amqp://...``); unset: the Redis URL.
    Only a Redis broker's keys get ``MEMORY_REDIS__KEY_PREFIX``."""
    pool: Literal["threads", "solo", "prefork"] = "threads"
    """The worker pool: ``threads`` (tasks mostly wait, on the batcher, Redis and the store), ``solo``, or
    ``prefork``, which the embedded engine (``backend=edge``) allows only with concurrency 1."""
    concurrency: int = Field(default=64, ge=1)
    """Tasks one worker runs at once. With threads, enough of them in flight let small writes be embedded
    together (measured: 64 beats 16 and 128 for one-item adds)."""
    max_retries: int = Field(default=5, ge=0)
    """Retries of a task that failed transiently (store, Redis or summarizer unavailable) before it is
    dead-lettered."""
    retry_backoff_max: int = Field(default=60, ge=1)
    """Seconds: the cap of the exponential, jittered wait between retries. Must be below
    ``VISIBILITY_TIMEOUT``."""
    # Early redelivery is safe by design: tests/faults/test_redelivery.py.
    visibility_timeout: int = Field(default=300, ge=1)
    """Seconds after which Redis redelivers a task a worker has not acknowledged (a killed worker's tasks come
    back then); must exceed ``RETRY_BACKOFF_MAX``. Redelivering a slow task early costs work, not correctness:
    writes are monotonic (deletes leave tombstones) and compaction is single-flight."""
    reply_ttl: int = Field(default=600, ge=1)
    """Seconds a task's reply waits in Redis for its caller; an unread reply expires then."""
    task_events: bool = False
    """Task events (what Flower shows); they cost three broker messages per task, ~10% of the throughput of
    small writes. Flower switches them on in the workers while it runs (its ``enable_events`` default)."""
    heartbeat_interval: float = Field(default=1.0, gt=0, le=60)
    """Seconds between a worker's heartbeats in Redis; it counts as gone after four missed beats, and a waiting
    client then stops waiting for it. Clients read it too: set it the same everywhere."""

    @model_validator(mode="after")
    def _redelivery_after_backoff(self) -> CelerySettings:
        # A retry waits in the worker as an unacknowledged ETA message; if it outlived the
        # visibility timeout, Redis would hand it to a second worker as well.
        if self.visibility_timeout <= self.retry_backoff_max:
            raise ValueError(
                f"visibility_timeout ({self.visibility_timeout}s) must exceed retry_backoff_max "
                f"({self.retry_backoff_max}s), or retried tasks are delivered twice"
            )
        return self


class AuthSettings(_Group):
    """Per-namespace API tokens (off when unset): a JSON object of token -> namespace, kept secret."""

    tokens: Secret = None
    """A JSON object of token -> namespace, like ``{"tok": "acme"}``: when set, workers refuse every task whose
    token does not grant the namespace it names. Set it on the workers (on clients too, to refuse early)."""

    @field_validator("tokens")
    @classmethod
    def _token_map(cls, value: SecretStr | None) -> SecretStr | None:
        # Checked here so a bad map stops a process at start-up; memory_core.core.auth reads it.
        if value is not None:
            try:
                raw = json.loads(value.get_secret_value())
            except ValueError:
                raw = None
            if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
                raise ValueError('expected a JSON object of token -> namespace, like {"tok": "acme"} (not shown)')
        return value


class ClientSettings(_Group):
    """How the thin client waits for workers, and the token it sends when auth is on."""

    timeout: float = Field(default=60.0, gt=0)
    """Seconds a waiting call waits for its reply before ``ReplyTimeout`` (the task may still run); a forced
    compaction waits at least 600."""
    token: Secret = None
    """The token this client sends with every task (``MEMORY_AUTH__TOKENS`` maps it to its namespace)."""
    publish_retries: int = Field(default=2, ge=0)
    """How many times publishing a task reconnects to the broker before ``BrokerUnavailable``; 0: no retry."""
    reconnect_window: float = Field(default=10.0, ge=0)
    """Seconds a waiting call keeps reconnecting to a restarting Redis (its task is queued already) before
    ``BrokerUnavailable``. Workers retry writing a reply this long, and a dead letter six times as long."""
    coalesce_max_items: int = Field(default=64, ge=1, le=1_000)
    """Concurrent adds to one set from this process share a broker message, up to this many items
    (``memory_core.client.coalescing``); 1 sends every add on its own."""
    coalesce_linger_ms: float = Field(default=1.0, ge=0, le=100)
    """Milliseconds the next publish waits, while several threads add at once, for the callers the previous one
    released, so they share a message. A lone caller never waits; 0 turns it off."""
    worker_grace: float = Field(default=10.0, ge=0)
    """Seconds a waiting call gives a vanished worker (no heartbeat) to come back before ``NoWorkerAvailable``;
    the task stays queued. A call made while no worker consumes its queue fails at once, sending nothing."""
    async_connections: int = Field(default=256, ge=2, le=10_000)
    """Redis connections one ``AsyncMemoryClient`` may hold at once: each call waiting for its reply holds one,
    so this many calls wait in parallel and the next ones queue for a connection."""


class FlowerSettings(_Group):
    """The Flower dashboard as ``memory-core flower`` starts it: loopback only by default, and basic auth unless
    in dev mode."""

    address: str = "127.0.0.1"
    """Address Flower listens on (``--dev`` always uses 127.0.0.1)."""
    port: int = Field(default=5555, ge=1, le=65535)
    """Port Flower listens on."""
    basic_auth: Secret = None
    """``user:password``, or several separated by commas; required by ``memory-core flower`` unless ``--dev``.
    Handed to Flower through its environment, never its command line."""

    @field_validator("basic_auth")
    @classmethod
    def _user_and_password(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            for pair in value.get_secret_value().split(","):
                user, _, password = pair.partition(":")
                if not user or not password:
                    raise ValueError("expected user:password[,user:password...] (the value is not shown)")
        return value


class MetricsSettings(_Group):
    """Prometheus metrics served by each worker process (``/metrics``)."""

    enabled: bool = True
    """Serves the worker's metrics at ``http://ADDRESS:PORT/metrics``."""
    address: str = "127.0.0.1"
    """Address the metrics endpoint listens on; 127.0.0.1 keeps it local, ``0.0.0.0`` lets a remote
    Prometheus scrape it."""
    port: int = Field(default=9464, ge=0, le=65535)
    """Port of the metrics endpoint; 0 picks a free one (logged). A port taken by another process is logged,
    never fatal: give each worker on one host its own port, or 0."""
    top_namespaces: int = Field(default=10, ge=0, le=1_000)
    """Items per namespace (``memory_core_items``) are exported for this many of the largest namespaces; the
    rest are summed as ``(other)``."""


class TracingSettings(_Group):
    """OpenTelemetry traces: off unless enabled, and exported only to ``endpoint`` (OTLP over HTTP)."""

    enabled: bool = False
    """Records OpenTelemetry traces in clients and workers (a task's spans continue the trace of the call
    that sent it). Needs the ``tracing`` extra (opentelemetry-sdk and the OTLP exporter)."""
    endpoint: str | None = None
    """OTLP/HTTP endpoint the spans are sent to, e.g. ``http://otel-collector:4318/v1/traces``; unset, spans
    are recorded but not exported (a warning says so)."""
    service_name: str = "memory-core"
    """The ``service.name`` of this process's spans."""


class StackSettings(_Group):
    """``memory-core up`` and ``backup``: where the local stack keeps pid files, logs and store snapshots."""

    run_dir: UserPath = Field(
        default_factory=functools.partial(_in_data_dir, "run"),
        json_schema_extra={"shown_default": "<data dir>/run"},  # for the Configuration page
    )
    """Where ``memory-core up`` keeps pid files, logs, the local Redis's data and beat's schedule, so ``down``
    and ``status`` find them from any directory (the data dir: see ``MEMORY_QDRANT__PATH``); a relative path
    is taken from the working directory."""
    backup_dir: UserPath = Field(
        default_factory=functools.partial(_in_data_dir, "backups"),
        json_schema_extra={"shown_default": "<data dir>/backups"},  # for the Configuration page
    )
    """Where ``memory-core backup`` has a worker write snapshots of the embedded engine (one folder per label),
    and ``restore`` reads them (the data dir: see ``MEMORY_QDRANT__PATH``); a relative path is taken from each
    process's working directory."""


class Settings(BaseSettings):
    """All of memory-core's configuration, from ``MEMORY_*`` variables (and ``.env`` when present)."""

    model_config = SettingsConfigDict(
        env_prefix="MEMORY_",
        env_nested_delimiter="__",
        env_file=".env",
        extra="forbid",
    )

    redis: RedisSettings = RedisSettings()
    # Built per Settings, not once at import: their paths default to a directory found when the settings are read.
    qdrant: QdrantSettings = Field(default_factory=QdrantSettings)
    embedder: EmbedderSettings = EmbedderSettings()
    rerank: RerankSettings = RerankSettings()
    anthropic: AnthropicSettings = AnthropicSettings()
    limits: LimitsSettings = LimitsSettings()
    quotas: QuotaSettings = QuotaSettings()
    compaction: CompactionSettings = CompactionSettings()
    formation: FormationSettings = FormationSettings()
    cache: CacheSettings = CacheSettings()
    maintenance: MaintenanceSettings = MaintenanceSettings()
    reindex: ReindexSettings = ReindexSettings()
    redaction: RedactionSettings = RedactionSettings()
    auth: AuthSettings = AuthSettings()
    celery: CelerySettings = CelerySettings()
    client: ClientSettings = ClientSettings()
    flower: FlowerSettings = FlowerSettings()
    short_term: ShortTermSettings = ShortTermSettings()
    session: SessionSettings = SessionSettings()
    checkpoints: CheckpointSettings = CheckpointSettings()
    recall: RecallSettings = RecallSettings()
    batching: BatchingSettings = BatchingSettings()
    profile: ProfileSettings = ProfileSettings()
    mcp: McpSettings = McpSettings()
    console: ConsoleSettings = ConsoleSettings()
    metrics: MetricsSettings = MetricsSettings()
    tracing: TracingSettings = TracingSettings()
    stack: StackSettings = Field(default_factory=StackSettings)

    @model_validator(mode="after")
    def _tombstones_outlive_redelivery(self) -> Settings:
        # A task can come back (visibility timeout) after its retries have backed off, and a write riding out
        # an embedding outage retries for its minutes on top (plus one last backoff); a tombstone that went
        # before that would let the replayed write bring a deleted item back.
        celery = self.celery
        outage = self.embedder.outage_retry * 60 + celery.retry_backoff_max
        redelivery = celery.visibility_timeout + celery.max_retries * celery.retry_backoff_max + outage
        if self.qdrant.tombstone_ttl <= redelivery:
            raise ValueError(
                f"MEMORY_QDRANT__TOMBSTONE_TTL ({self.qdrant.tombstone_ttl:g}s) must exceed the longest redelivery, "
                f"MEMORY_CELERY__VISIBILITY_TIMEOUT + MAX_RETRIES x RETRY_BACKOFF_MAX + MEMORY_EMBEDDER__OUTAGE_RETRY "
                f"+ RETRY_BACKOFF_MAX ({redelivery:g}s)"
            )
        return self

    @property
    def broker_url(self) -> str:
        """The Celery broker: ``celery.broker_url`` when set, else the Redis URL."""
        return self.celery.broker_url or self.redis.url

    def with_token(self, token: str | None) -> Settings:
        """These settings with ``token`` as the client's token (a server acting for a caller); None: unchanged."""
        if token is None:
            return self
        return self.model_copy(update={"client": self.client.model_copy(update={"token": SecretStr(token)})})

    @property
    def broker_is_redis(self) -> bool:
        """Whether the broker is Redis (then its queues are keys of ``broker_key_prefix``)."""
        return urlsplit(self.broker_url).scheme in {"redis", "rediss", "unix"}

    @property
    def broker_key_prefix(self) -> str:
        """Prepended to every broker key (queues, unacked index) on a Redis broker, so deployments with their
        own ``redis.key_prefix`` can share a Redis database without taking each other's tasks. Not under
        ``{key_prefix}:``, so nothing that scans the cache keys touches queued tasks."""
        return f"{self.redis.key_prefix}/" if self.broker_is_redis else ""


def setting_names() -> frozenset[str]:
    """Every environment variable a setting is read from: ``MEMORY_GROUP`` (JSON) and ``MEMORY_GROUP__FIELD``."""
    names = set()

    def walk(prefix: str, model: type[BaseModel]) -> None:
        for name, field in model.model_fields.items():
            variable = f"{prefix}{name.upper()}"
            names.add(variable)
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                walk(variable + "__", field.annotation)

    walk("MEMORY_", Settings)
    return frozenset(names)


def unknown_setting_names(environ: Mapping[str, str]) -> dict[str, str | None]:
    """``MEMORY_*`` variables that are no setting (a typo is otherwise silently ignored), each with the
    closest setting's name, if one is close. ``MEMORY_TEST_*`` belong to the test suite."""
    known = setting_names()
    found: dict[str, str | None] = {}
    for name in environ:
        upper = name.upper()
        if upper.startswith("MEMORY_") and not upper.startswith("MEMORY_TEST_") and upper not in known:
            close = difflib.get_close_matches(upper, known, n=1, cutoff=0.75)
            found[name] = close[0] if close else None
    return found


def load_settings(**overrides: object) -> Settings:
    """Builds ``Settings`` from the environment, turning validation errors into ``ConfigurationError``.

    The message names each offending variable (``MEMORY_GROUP__FIELD``) and what was wrong. Variables
    that look like settings but are none are named in a warning.
    """
    for name, close in unknown_setting_names(os.environ).items():
        hint = f"; did you mean {close}?" if close else "; see .env.example for every setting"
        logger.warning("%s is not a memory-core setting and is ignored%s", name, hint)
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]  # overrides are validated by pydantic
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            if not err["loc"]:  # a check across groups: its message names the variables, the input is everything
                problems.append(err["msg"])
                continue
            name = "MEMORY_" + "__".join(str(part).upper() for part in err["loc"])
            problems.append(f"{name}: {err['msg']} (got {_safe_input(err['loc'], err.get('input'))!r})")
        raise ConfigurationError("invalid settings: " + "; ".join(problems)) from exc
    _warn_of_legacy_data_dir(settings)
    return settings


def _warn_of_legacy_data_dir(settings: Settings) -> None:
    legacy = LEGACY_DATA_DIR.absolute()
    defaulted = [
        (settings.qdrant, "path", "MEMORY_QDRANT__PATH"),
        (settings.stack, "run_dir", "MEMORY_STACK__RUN_DIR"),
        (settings.stack, "backup_dir", "MEMORY_STACK__BACKUP_DIR"),
    ]
    in_use = [
        variable
        for group, name, variable in defaulted
        if name not in group.model_fields_set and Path(getattr(group, name)).absolute().is_relative_to(legacy)
    ]
    if in_use:
        target = user_data_dir()
        logger.warning(
            "using %s, the data directory of earlier versions, since it is in the working directory and %s does "
            "not exist: processes started elsewhere will not find it. Move it (mkdir -p %s && mv %s %s), or set %s",
            legacy,
            target,
            target.parent,
            legacy,
            target,
            ", ".join(in_use),
        )


def _secret_locations() -> frozenset[tuple[str, str]]:
    """(group, field) of every ``SecretStr`` setting, found from the models so a new secret is covered."""
    found = set()
    for group, field in Settings.model_fields.items():
        model = field.annotation
        if isinstance(model, type) and issubclass(model, BaseModel):
            for name, inner in model.model_fields.items():
                if "SecretStr" in str(inner.annotation):
                    found.add((group, name))
    return frozenset(found)


def _safe_input(loc: tuple[int | str, ...], value: object) -> object:
    # A mistyped secret must not end up in a log line through its error message.
    if tuple(str(part) for part in loc[:2]) in _secret_locations():
        return "<redacted>"
    return redact_url(value) if isinstance(value, str) and "://" in value else value


@functools.cache
def get_settings() -> Settings:
    """The process-wide settings; for entry points only."""
    return load_settings()
