"""memory-core: distributed memory for AI agents.

A thin client enqueues memory writes and searches as Celery tasks; workers embed
and persist to Qdrant; Redis is the broker and shared cache.
"""

from memory_core.client import LongTermMemory, MemoryClient, WriteReceipt
from memory_core.client.aio import AsyncLongTermMemory, AsyncMemoryClient, AsyncWriteReceipt
from memory_core.core.errors import (
    AuthorizationError,
    BrokerUnavailable,
    CompactionError,
    ConfigurationError,
    ConflictError,
    EmbedderError,
    InvalidRequestError,
    MemoryCoreError,
    MemorySetNotFound,
    NotFoundError,
    NoWorkerAvailable,
    QuotaExceeded,
    ReplyTimeout,
    SetDefinitionConflict,
    StoreError,
    SummarizerError,
    TransientStoreError,
)
from memory_core.core.messages import ForgetReceipt, RecalledItem, RecallReply
from memory_core.core.models import (
    ChatMessage,
    ClientStats,
    CompactionConfig,
    DatetimeRange,
    EvictionPolicy,
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
    "DatetimeRange",
    "EmbedderError",
    "EvictionPolicy",
    "ForgetReceipt",
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
    "QuotaExceeded",
    "RecallReply",
    "RecalledItem",
    "ReplyTimeout",
    "Session",
    "SetDefinitionConflict",
    "Settings",
    "ShortTermMemory",
    "StoreError",
    "SummarizerError",
    "TransientStoreError",
    "Usage",
    "UserProfile",
    "WriteReceipt",
    "combined",
    "get_settings",
    "load_settings",
]
