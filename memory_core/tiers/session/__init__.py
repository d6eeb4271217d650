"""Session memory: a conversation's history in Redis, and LangChain-style strategies that read it.

``client.session(namespace, session_id)`` returns a :class:`Session`; its strategies
(``buffer``, ``window``, ``token_buffer``, ``summary``, ``entity``, ``vector``) and
:func:`combined` expose ``load(inputs)`` and ``save(inputs, outputs)``.
"""

from memory_core.tiers.session.history import SessionHistory, SessionMessage
from memory_core.tiers.session.session import Session
from memory_core.tiers.session.strategies import (
    BufferMemory,
    CombinedMemory,
    ConversationMemory,
    EntityMemory,
    MemoryStats,
    SummaryMemory,
    TokenBufferMemory,
    VectorMemory,
    WindowMemory,
    combined,
)

__all__ = [
    "BufferMemory",
    "CombinedMemory",
    "ConversationMemory",
    "EntityMemory",
    "MemoryStats",
    "Session",
    "SessionHistory",
    "SessionMessage",
    "SummaryMemory",
    "TokenBufferMemory",
    "VectorMemory",
    "WindowMemory",
    "combined",
]
