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
    BaseModel,
    BeforeValidator,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from memory_core.errors import ConfigurationError

logger = logging.getLogger(__name__)


def _blank_is_unset(value: object) -> object:
    # docker-compose passes MEMORY_ANTHROPIC__API_KEY= when no key is given: an empty secret is no secret.
    raw = value.get_secret_value() if isinstance(value, SecretStr) else value
    return None if isinstance(raw, str) and not raw.strip() else value


Secret = Annotated[SecretStr | None, BeforeValidator(_blank_is_unset)]
"""An optional secret; empty or blank counts as unset."""


def redact_url(url: str) -> str:
    """Returns ``url`` with any password replaced by ``***``, for logs and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


class RedisSettings(BaseModel):
    """Redis: the broker (unless ``celery.broker_url`` is set) and the shared L2 cache."""

    url: str = "redis://localhost:6379/0"
    socket_timeout: float = Field(default=5.0, gt=0)
    key_prefix: str = Field(default="mc", pattern=r"^[A-Za-z0-9_-]{1,16}$")

    @field_validator("url")
    @classmethod
    def _redis_scheme(cls, value: str) -> str:
        if urlsplit(value).scheme not in {"redis", "rediss", "unix"}:
            raise ValueError(f"expected a redis://, rediss:// or unix:// URL, got {redact_url(value)!r}")
        return value


class QdrantSettings(BaseModel):
    """Where vectors live: the embedded Qdrant Edge engine, a Qdrant server, or qdrant-client's local mode."""

    backend: Literal["edge", "server", "local"] = "edge"
    path: Path = Path(".memory-core/qdrant")
    url: str | None = None
    api_key: Secret = None
    collection_prefix: str = Field(default="memory_core", pattern=r"^[A-Za-z0-9_-]{1,48}$")
    timeout: float = Field(default=10.0, gt=0)
    # How long a deleted item's tombstone refuses older writes of it: longer than any task can be delivered
    # again (visibility timeout, retries), and than the age of dead letters you would replay.
    tombstone_ttl: float = Field(default=7 * 24 * 3600.0, gt=0)
    # Fault tests only: while this file exists, every store call fails with TransientStoreError.
    fault_flag: Path | None = None


class EmbedderSettings(BaseModel):
    """The embedding model the workers run. ``hashing`` is for unit tests and must be chosen explicitly."""

    model: Literal["all-MiniLM-L6-v2", "hashing"] = "all-MiniLM-L6-v2"
    threads: int = Field(default=1, ge=1, le=64)
    batch_size: int = Field(default=32, ge=1, le=1024)
    max_tokens: int = Field(default=256, ge=8, le=512)


class AnthropicSettings(BaseModel):
    """Claude, used by the summarizer when an API key is set."""

    api_key: Secret = None
    base_url: str | None = None
    timeout: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=2, ge=0)


class CompactionSettings(BaseModel):
    """Compaction: batching to the model's context, locking, and the beat sweep."""

    max_input_tokens: int = Field(default=60_000, ge=500)
    max_output_tokens: int = Field(default=4_096, ge=64)
    lock_ttl: int = Field(default=600, ge=5)
    sweep_interval: float = Field(default=300.0, gt=0)
    sweep_max_sets: int = Field(default=10_000, ge=1)


class CacheSettings(BaseModel):
    """The client's L1 (per process) over L2 (Redis), and the workers' embedding cache."""

    enabled: bool = True
    l1_max_entries: int = Field(default=10_000, ge=0)
    l1_max_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    l1_ttl: float = Field(default=30.0, ge=0)
    l2_ttl: int = Field(default=300, ge=1)
    embedding_ttl: int = Field(default=86_400, ge=1)
    # Embeddings of texts being written (adds, imports) live shorter: long enough for a retry or a repeated
    # text, while a day of them would hold ~2.7 KB of Redis per item written.
    write_embedding_ttl: int = Field(default=3_600, ge=1)


class MaintenanceSettings(BaseModel):
    """Beat's schedule (seconds between runs) and how much one run may do."""

    ttl_sweep_interval: float = Field(default=60.0, gt=0)
    flush_access_interval: float = Field(default=30.0, gt=0)
    evict_interval: float = Field(default=120.0, gt=0)
    # Builds the HNSW index over new points (embedded engine): filtered search over a big set needs it.
    optimize_interval: float = Field(default=600.0, gt=0)
    max_items_per_run: int = Field(default=10_000, ge=1)


class RedactionSettings(BaseModel):
    """Optional redaction of personal data in the worker, before embedding and storage (off by default)."""

    enabled: bool = False
    kinds: list[Literal["email", "phone", "card"]] = ["email", "phone", "card"]


class LimitsSettings(BaseModel):
    """What one call may carry; checked in the client before anything is enqueued, and again in the worker."""

    max_items_per_call: int = Field(default=1000, ge=1, le=100_000)
    max_value_chars: int = Field(default=32_000, ge=1)
    max_metadata_bytes: int = Field(default=16_384, ge=2)
    max_metadata_depth: int = Field(default=5, ge=1)
    max_query_chars: int = Field(default=4_000, ge=1)
    max_search_limit: int = Field(default=100, ge=1)


class ShortTermSettings(BaseModel):
    """Short-term and sensory state: how long an untouched state object lives in Redis (0: no expiry)."""

    ttl: int = Field(default=86_400, ge=0)
    # The largest value one path may hold, as stored (JSON): Redis answers every read of the state with
    # the whole hash, so one huge value slows every reader of it.
    max_value_bytes: int = Field(default=1_048_576, ge=1, le=512 * 1_048_576)


class SessionSettings(BaseModel):
    """Session memory: history length and TTL in Redis, and the long-term set sessions are promoted into."""

    ttl: int = Field(default=7 * 86_400, ge=0)
    max_messages: int = Field(default=1_000, ge=2)
    promotion_set: str = Field(default="sessions", pattern=r"^[A-Za-z0-9_.-]{1,128}$")
    promotion_capacity: int = Field(default=10_000, ge=1)
    summary_model: str = Field(default="claude-haiku-4-5", min_length=1)


class RecallSettings(BaseModel):
    """How recall scores candidates from every tier: a weighted sum, then near-duplicates removed."""

    relevance_weight: float = Field(default=0.7, ge=0)
    recency_weight: float = Field(default=0.2, ge=0)
    importance_weight: float = Field(default=0.1, ge=0)
    half_life_hours: float = Field(default=72.0, gt=0)  # recency halves every this many hours
    dedup_threshold: float = Field(default=0.92, gt=0, le=1)  # cosine at which two candidates are one fact
    session_messages: int = Field(default=20, ge=0)  # the newest messages of the session taken as candidates
    per_set: int = Field(default=20, ge=1, le=100)  # hits taken from each long-term set
    max_candidates: int = Field(default=200, ge=1)  # short-term and session candidates sent to the worker


class ProfileSettings(BaseModel):
    """User profiles: the long-term set each profile is re-embedded into (one per user, the user being the key)."""

    set_name: str = Field(default="profile", pattern=r"^[A-Za-z0-9_.-]{1,128}$")


class CheckpointSettings(BaseModel):
    """Checkpoints: seconds a thread's checkpoints live after its last put (0: forever), and how many are kept."""

    ttl: int = Field(default=30 * 86_400, ge=0)
    max_per_thread: int = Field(default=1_000, ge=1)


class BatchingSettings(BaseModel):
    """Worker-side micro-batching of writes: adds arriving as many small tasks are embedded together."""

    enabled: bool = True
    max_items: int = Field(default=64, ge=1, le=4096)
    # How long a small batch waits for more while another batch thread is busy (never when idle).
    max_wait_ms: float = Field(default=50.0, ge=0, le=1000)
    threads: int = Field(default=0, ge=0, le=64)  # batch threads; 0 = one per CPU core


class CelerySettings(BaseModel):
    """The task layer: broker, delivery, retries and the worker pool."""

    broker_url: str | None = None
    pool: Literal["threads", "solo", "prefork"] = "threads"
    # Threads: tasks mostly wait (on the batcher, Redis, the store), and enough of them in flight let small
    # writes be embedded together (measured: 64 beats 16 and 128 for one-item adds).
    concurrency: int = Field(default=64, ge=1)
    max_retries: int = Field(default=5, ge=0)
    retry_backoff_max: int = Field(default=60, ge=1)
    # Redis redelivers a task a worker has not acknowledged after this many seconds (a killed
    # worker's tasks come back then). Writes are monotonic (a store keeps each item's newest seq,
    # deletes leave tombstones) and compaction is single-flight, so an early redelivery of a slow
    # task costs work, not correctness (tests/faults/test_redelivery.py).
    visibility_timeout: int = Field(default=300, ge=1)
    reply_ttl: int = Field(default=600, ge=1)
    # Task events (what Flower shows) cost three broker messages per task: ~10% of the throughput of
    # small writes. Flower switches them on in the workers while it runs (its enable_events default).
    task_events: bool = False
    # Each worker refreshes its heartbeat (memory_core.liveness) this often; it counts as gone after four
    # missed beats, and a waiting client then stops waiting for it.
    heartbeat_interval: float = Field(default=1.0, gt=0, le=60)

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


class AuthSettings(BaseModel):
    """Per-namespace API tokens (off when unset): a JSON object of token -> namespace, kept secret."""

    tokens: Secret = None

    @field_validator("tokens")
    @classmethod
    def _token_map(cls, value: SecretStr | None) -> SecretStr | None:
        # Checked here so a bad map stops a process at start-up; memory_core.auth reads it.
        if value is not None:
            try:
                raw = json.loads(value.get_secret_value())
            except ValueError:
                raw = None
            if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
                raise ValueError('expected a JSON object of token -> namespace, like {"tok": "acme"} (not shown)')
        return value


class ClientSettings(BaseModel):
    """How the thin client waits for workers, and the token it sends when auth is on."""

    timeout: float = Field(default=60.0, gt=0)
    token: Secret = None
    publish_retries: int = Field(default=2, ge=0)
    # A task already published keeps its client waiting through a Redis restart this long.
    reconnect_window: float = Field(default=10.0, ge=0)
    # Concurrent adds to one set from this process share a broker message, up to this many items
    # (memory_core.coalescing); 1 sends every add on its own.
    coalesce_max_items: int = Field(default=64, ge=1, le=1_000)
    # While several callers add at once, the next publish waits up to this long for the callers the
    # previous one released, so they share a message (a lone caller never waits); 0 turns it off.
    coalesce_linger_ms: float = Field(default=1.0, ge=0, le=100)
    # A call that needs a worker fails with NoWorkerAvailable at once when none consumes its queue. One
    # already waiting when the last worker goes away waits this long for one to come back (a restart).
    worker_grace: float = Field(default=10.0, ge=0)


class FlowerSettings(BaseModel):
    """The Flower dashboard as ``ops/flower`` starts it: loopback only, and basic auth unless in dev mode."""

    address: str = "127.0.0.1"
    port: int = Field(default=5555, ge=1, le=65535)
    # "user:password", or several separated by commas. Required by ops/flower unless --dev.
    basic_auth: Secret = None

    @field_validator("basic_auth")
    @classmethod
    def _user_and_password(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            for pair in value.get_secret_value().split(","):
                user, _, password = pair.partition(":")
                if not user or not password:
                    raise ValueError("expected user:password[,user:password...] (the value is not shown)")
        return value


class MetricsSettings(BaseModel):
    """Prometheus metrics served by each worker process (``/metrics``)."""

    enabled: bool = True
    address: str = "127.0.0.1"
    # 0 picks a free port (logged). A port taken by another process is logged, never fatal.
    port: int = Field(default=9464, ge=0, le=65535)
    # Items per namespace is exported for the largest namespaces only (the rest as "(other)").
    top_namespaces: int = Field(default=10, ge=0, le=1_000)


class TracingSettings(BaseModel):
    """OpenTelemetry traces: off unless enabled, and exported only to ``endpoint`` (OTLP over HTTP)."""

    enabled: bool = False
    # e.g. http://otel-collector:4318/v1/traces; needs the "tracing" extra (opentelemetry-sdk + exporter).
    endpoint: str | None = None
    service_name: str = "memory-core"


class StackSettings(BaseModel):
    """``memory-core up`` and ``backup``: where the local stack keeps pid files, logs and store snapshots."""

    run_dir: Path = Path(".memory-core/run")
    # memory-core backup: where a worker writes snapshots of the embedded engine (one folder per label).
    backup_dir: Path = Path(".memory-core/backups")


class Settings(BaseSettings):
    """All of memory-core's configuration, from ``MEMORY_*`` variables (and ``.env`` when present)."""

    model_config = SettingsConfigDict(
        env_prefix="MEMORY_",
        env_nested_delimiter="__",
        env_file=".env",
        extra="forbid",
    )

    redis: RedisSettings = RedisSettings()
    qdrant: QdrantSettings = QdrantSettings()
    embedder: EmbedderSettings = EmbedderSettings()
    anthropic: AnthropicSettings = AnthropicSettings()
    limits: LimitsSettings = LimitsSettings()
    compaction: CompactionSettings = CompactionSettings()
    cache: CacheSettings = CacheSettings()
    maintenance: MaintenanceSettings = MaintenanceSettings()
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
    metrics: MetricsSettings = MetricsSettings()
    tracing: TracingSettings = TracingSettings()
    stack: StackSettings = StackSettings()

    @model_validator(mode="after")
    def _tombstones_outlive_redelivery(self) -> Settings:
        # A task can come back (visibility timeout) after its retries have backed off; a tombstone that
        # went before that would let the replayed write bring a deleted item back.
        redelivery = self.celery.visibility_timeout + self.celery.max_retries * self.celery.retry_backoff_max
        if self.qdrant.tombstone_ttl <= redelivery:
            raise ValueError(
                f"MEMORY_QDRANT__TOMBSTONE_TTL ({self.qdrant.tombstone_ttl:g}s) must exceed the longest redelivery, "
                f"MEMORY_CELERY__VISIBILITY_TIMEOUT + MAX_RETRIES x RETRY_BACKOFF_MAX ({redelivery}s)"
            )
        return self

    @property
    def broker_url(self) -> str:
        """The Celery broker: ``celery.broker_url`` when set, else the Redis URL."""
        return self.celery.broker_url or self.redis.url

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
        return Settings(**overrides)  # type: ignore[arg-type]  # overrides are validated by pydantic
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            if not err["loc"]:  # a check across groups: its message names the variables, the input is everything
                problems.append(err["msg"])
                continue
            name = "MEMORY_" + "__".join(str(part).upper() for part in err["loc"])
            problems.append(f"{name}: {err['msg']} (got {_safe_input(err['loc'], err.get('input'))!r})")
        raise ConfigurationError("invalid settings: " + "; ".join(problems)) from exc


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
