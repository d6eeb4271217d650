"""memory-core: distributed memory for AI agents.

A thin client enqueues memory writes and searches as Celery tasks; workers embed
and persist to Qdrant; Redis is the broker and shared cache.
"""

from importlib import metadata as _metadata

from memory_core.client import LongTermMemory, MemoryClient, WriteReceipt
from memory_core.client.aio import AsyncLongTermMemory, AsyncMemoryClient, AsyncWriteReceipt
from memory_core.core.errors import (
    AuthorizationError,
    BrokerUnavailable,
    CompactionError,
    ConfigurationError,
    ConflictError,
    CorruptDataError,
    EmbedderError,
    FormationBusy,
    FormationError,
    InvalidRequestError,
    MemoryCoreError,
    MemorySetNotFound,
    NotFoundError,
    NoWorkerAvailable,
    QuotaExceeded,
    RedisCommandError,
    ReplyTimeout,
    RerankerError,
    SetDefinitionConflict,
    StoreError,
    SummarizerError,
    SummarizerUnavailable,
    TransientEmbedderError,
    TransientRerankerError,
    TransientStoreError,
)
from memory_core.core.messages import (
    ForgetReceipt,
    ForgetSourcesReport,
    FormationReport,
    PlannedFact,
    RecalledItem,
    RecallReply,
)
from memory_core.core.models import (
    ChatMessage,
    ClientStats,
    CompactionConfig,
    DatetimeRange,
    EvictionPolicy,
    FactEvent,
    FactInfo,
    MemorySet,
    MemorySetItem,
    MessageRole,
    Usage,
)
from memory_core.core.settings import Settings, get_settings, load_settings
from memory_core.tiers.checkpoints import Checkpoint, CheckpointStore
from memory_core.tiers.profile import UserProfile
from memory_core.tiers.session import Session, combined
from memory_core.tiers.short_term import MemoryObject, ShortTermMemory

try:
    __version__ = _metadata.version("memory-core")
    """The installed distribution's version (PEP 440), as ``memory-core --version`` prints it."""
except _metadata.PackageNotFoundError:  # imported from a checkout that was never installed
    __version__ = "0+unknown"

__all__ = [
    "AsyncLongTermMemory",
    "AsyncMemoryClient",
    "AsyncWriteReceipt",
    "AuthorizationError",
    "BrokerUnavailable",
    "ChatMessage",
    "Checkpoint",
    "CheckpointStore",
    "ClientStats",
    "CompactionConfig",
    "CompactionError",
    "ConfigurationError",
    "ConflictError",
    "CorruptDataError",
    "DatetimeRange",
    "EmbedderError",
    "EvictionPolicy",
    "FactEvent",
    "FactInfo",
    "ForgetReceipt",
    "ForgetSourcesReport",
    "FormationBusy",
    "FormationError",
    "FormationReport",
    "InvalidRequestError",
    "LongTermMemory",
    "MemoryClient",
    "MemoryCoreError",
    "MemoryObject",
    "MemorySet",
    "MemorySetItem",
    "MemorySetNotFound",
    "MessageRole",
    "NoWorkerAvailable",
    "NotFoundError",
    "PlannedFact",
    "QuotaExceeded",
    "RecallReply",
    "RecalledItem",
    "RedisCommandError",
    "ReplyTimeout",
    "RerankerError",
    "Session",
    "SetDefinitionConflict",
    "Settings",
    "ShortTermMemory",
    "StoreError",
    "SummarizerError",
    "SummarizerUnavailable",
    "TransientEmbedderError",
    "TransientRerankerError",
    "TransientStoreError",
    "Usage",
    "UserProfile",
    "WriteReceipt",
    "combined",
    "get_settings",
    "load_settings",
]
