"""The one error tree of memory-core.

Every error raised by ``memory_core`` (and every worker-side failure a waiting
client sees) is a ``MemoryCoreError``::

    MemoryCoreError
    ├── ConfigurationError        (also a ValueError)
    ├── InvalidRequestError       (also a ValueError)
    │   └── ConflictError
    │       └── SetDefinitionConflict
    ├── NotFoundError
    │   └── MemorySetNotFound
    ├── AuthorizationError
    ├── QuotaExceeded
    ├── BrokerUnavailable         (Redis cannot answer now: retry later)
    ├── RedisCommandError         (Redis refused a command: a retry fails the same way)
    ├── CorruptDataError          (a value read back from Redis is not what memory-core writes)
    ├── ReplyTimeout
    │   └── NoWorkerAvailable
    ├── StoreError
    │   └── TransientStoreError   (tasks retry on these)
    ├── EmbedderError
    │   └── TransientEmbedderError (an endpoint busy or down for now: tasks retry, after its Retry-After)
    ├── RerankerError
    │   └── TransientRerankerError (a rerank endpoint busy or down for now: the search fails at once)
    ├── SummarizerError
    │   └── SummarizerUnavailable (its endpoint refuses connections)
    ├── CompactionError
    └── FormationError            (a formation's model failed for good, or answered twice unusably)
        └── FormationBusy         (the scope, the namespace or the model is busy: the task comes back later)

Catch broad (``MemoryCoreError``), recover narrow. Third-party exceptions
(redis, kombu, qdrant, onnxruntime, anthropic, httpx) are translated at the adapter
boundary with ``raise ... from exc`` and never escape the library.
"""

from __future__ import annotations


class MemoryCoreError(Exception):
    """Raised for any failure inside memory-core; the root of the tree."""


class ConfigurationError(MemoryCoreError, ValueError):
    """Raised when settings are missing, malformed or contradict each other."""


class InvalidRequestError(MemoryCoreError, ValueError):
    """Raised when a call's arguments or a task message fail validation; nothing was enqueued or written."""


class ConflictError(InvalidRequestError):
    """Raised when a request contradicts what exists (a set's other definition, a backup label taken)."""


class SetDefinitionConflict(ConflictError):
    """Raised when get_or_create names an existing memory set with a different definition."""


class NotFoundError(MemoryCoreError):
    """Raised when a named thing does not exist."""


class MemorySetNotFound(NotFoundError):
    """Raised when a memory set does not exist in the given namespace and key."""


class AuthorizationError(MemoryCoreError):
    """Raised when a call's token does not grant the namespace it names (auth is on)."""


class QuotaExceeded(MemoryCoreError):
    """Raised when an add would take a namespace over one of its quotas (items, bytes, writes per second);
    nothing of that add was written. Names the namespace, the quota and what to do."""


class BrokerUnavailable(MemoryCoreError):
    """Raised when Redis (broker and cache) cannot be reached; names the redacted URL."""


class RedisCommandError(MemoryCoreError):
    """Raised when Redis answers but refuses a command (a bug, or a value past Redis' own range); not retryable."""


class CorruptDataError(MemoryCoreError):
    """Raised when a value read back from Redis is malformed (not JSON, too deep, wrong shape or type); only the
    call that read it fails."""


class ReplyTimeout(MemoryCoreError):
    """Raised when a worker did not answer a waiting call in time; the task may still run."""


class NoWorkerAvailable(ReplyTimeout):
    """Raised within seconds when no live worker consumes the queue a waiting call needs; names the queue."""


class StoreError(MemoryCoreError):
    """Raised when the vector store rejects or fails an operation."""


class TransientStoreError(StoreError):
    """Raised when the vector store failed in a way a retry may fix (connection, timeout, lock)."""


class EmbedderError(MemoryCoreError):
    """Raised when the embedding model is missing or fails."""


class TransientEmbedderError(EmbedderError):
    """Raised when an embeddings endpoint is busy or failing for now (429, 5xx, a timeout): tasks retry.

    ``retry_after``: the seconds the endpoint asked to wait (its ``Retry-After``), if it said; a retry comes no
    sooner (up to the tasks' longest backoff).
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RerankerError(MemoryCoreError):
    """Raised when the reranking model is missing or fails; a search that asked for reranking fails rather than
    answer in another order than it asked for."""


class TransientRerankerError(RerankerError):
    """Raised when a rerank endpoint is busy or failing for now (429, 5xx, a timeout, unreachable). The worker
    does not retry the search (its caller is waiting): retry it, or search with ``rerank=False``."""


class SummarizerError(MemoryCoreError):
    """Raised when the summarizer fails or replies with something unusable."""


class SummarizerUnavailable(SummarizerError):
    """Raised at once, without retries, when the summarizer's endpoint refuses connections (nothing listens)."""


class CompactionError(MemoryCoreError):
    """Raised when a compaction cannot complete."""


class FormationError(MemoryCoreError):
    """Raised when forming memories from messages fails for good: the model refused the request, or answered
    twice with a reply that is not what was asked (its raw replies are kept with the operation and in the
    dead letter, beside the messages)."""

    def __init__(self, message: str, *, raw_replies: list[str] | None = None) -> None:
        super().__init__(message)
        self.raw_replies = raw_replies or []


class FormationBusy(FormationError):
    """Raised when a formation must wait: another formation of its scope runs, its namespace has its share of
    formations in flight, or the model is rate-limited or overloaded (429, 529, a timeout). The task is sent
    again after ``retry_after`` seconds and never dead-lettered for it."""

    def __init__(self, message: str, *, retry_after: float = 2.0) -> None:
        # A default: a client rebuilds a worker's error from its message alone.
        super().__init__(message)
        self.retry_after = retry_after


CALLER_MISTAKES: tuple[type[MemoryCoreError], ...] = (
    InvalidRequestError,
    NotFoundError,
    AuthorizationError,
    QuotaExceeded,
)
"""Failures that are the caller's to fix (a request that fails validation, names what does not exist,
contradicts what exists, lacks the grant, or is over its namespace's quota): replied to, never retried,
never dead-lettered. Replaying the same message would fail the same way, and dead letters are what
operators alert on, for writes the system failed. One exception stays kept: a message of a schema version
this worker does not know (it may come from a newer client, and lands once the workers are upgraded)."""


def error_types() -> dict[str, type[MemoryCoreError]]:
    """Maps each error class name to its class, for rebuilding worker-side errors in the client."""
    found: dict[str, type[MemoryCoreError]] = {}
    pending: list[type[MemoryCoreError]] = [MemoryCoreError]
    while pending:
        cls = pending.pop()
        found[cls.__name__] = cls
        pending.extend(cls.__subclasses__())
    return found
