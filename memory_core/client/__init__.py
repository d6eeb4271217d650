"""The app side of the queue: the thin client that validates, scopes and enqueues, and never opens a store.

``MemoryClient`` hands out the handles (``long_term``, ``short_term``, ``session``, ``checkpoints``,
``profile``); the read caches, group commit of adds, dead-letter listing and the operator API live
beside it. Nothing here imports the engine (``memory_core.engine``), Celery or a model runtime.
"""

from memory_core.client.client import MemoryClient
from memory_core.client.long_term import LongTermMemory, WriteReceipt

__all__ = ["LongTermMemory", "MemoryClient", "WriteReceipt"]
