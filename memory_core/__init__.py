"""memory-core: distributed memory for AI agents.

A thin client enqueues memory writes and searches as Celery tasks; workers embed
and persist to Qdrant; Redis is the broker and shared cache.
"""

from memory_core.client import LongTermMemory, MemoryClient, WriteReceipt
from memory_core.errors import (
    AuthorizationError,
    BrokerUnavailable,
    CompactionError,
    ConfigurationError,
    EmbedderError,
    InvalidRequestError,
    MemoryCoreError,
    MemorySetNotFound,
    NotFoundError,
    ReplyTimeout,
    SetDefinitionConflict,
    StoreError,
    SummarizerError,
    TransientStoreError,
)
from memory_core.models import (
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
from memory_core.settings import Settings, get_settings, load_settings

__all__ = [
    "AuthorizationError",
    "BrokerUnavailable",
    "ChatMessage",
    "ClientStats",
    "CompactionConfig",
    "CompactionError",
    "ConfigurationError",
    "DatetimeRange",
    "EmbedderError",
    "EvictionPolicy",
    "InvalidRequestError",
    "LongTermMemory",
    "MemoryClient",
    "MemoryCoreError",
    "MemorySet",
    "MemorySetItem",
    "MemorySetNotFound",
    "MessageRole",
    "NotFoundError",
    "ReplyTimeout",
    "SetDefinitionConflict",
    "Settings",
    "StoreError",
    "SummarizerError",
    "TransientStoreError",
    "Usage",
    "WriteReceipt",
    "get_settings",
    "load_settings",
]
