"""Task names and the queue each one goes to: the one table both the client and the workers read.

Names are explicit strings (``memory.<verb>``), never derived from module paths,
so tasks can move between modules without breaking queued messages.
"""

from __future__ import annotations

WRITE_QUEUE = "memory.write"
READ_QUEUE = "memory.read"
MAINTENANCE_QUEUE = "memory.maintenance"
COMPACTION_QUEUE = "memory.compaction"
QUEUES = (WRITE_QUEUE, READ_QUEUE, MAINTENANCE_QUEUE, COMPACTION_QUEUE)

ADD = "memory.add"
DELETE = "memory.delete"
CREATE_SET = "memory.create_set"
DELETE_SET = "memory.delete_set"
FORGET = "memory.forget"
GET = "memory.get"
SEARCH = "memory.search"
SIZE = "memory.size"
GET_SET = "memory.get_set"
COMPACT = "memory.compact"
COMPACTION_SWEEP = "memory.compaction_sweep"
TTL_SWEEP = "memory.ttl_sweep"
FLUSH_ACCESS = "memory.flush_access"
EVICT = "memory.evict"
SESSION_FOLD = "memory.session_fold"
SESSION_ENTITIES = "memory.session_entities"
RECALL = "memory.recall"
OPTIMIZE = "memory.optimize"
LIST_SETS = "memory.list_sets"
EXPORT = "memory.export"
IMPORT = "memory.import"
BACKUP = "memory.backup"

OPS_NAMESPACE = "!ops"
"""Where replies to operator tasks that name no namespace (backup) go; no tenant can be named this."""
OPS_REPLIES = frozenset({BACKUP})

ROUTES: dict[str, str] = {
    ADD: WRITE_QUEUE,
    DELETE: WRITE_QUEUE,
    CREATE_SET: WRITE_QUEUE,
    DELETE_SET: WRITE_QUEUE,
    FORGET: WRITE_QUEUE,
    GET: READ_QUEUE,
    SEARCH: READ_QUEUE,
    SIZE: READ_QUEUE,
    GET_SET: READ_QUEUE,
    RECALL: READ_QUEUE,
    LIST_SETS: READ_QUEUE,
    EXPORT: READ_QUEUE,
    IMPORT: WRITE_QUEUE,
    BACKUP: MAINTENANCE_QUEUE,
    COMPACT: COMPACTION_QUEUE,
    COMPACTION_SWEEP: MAINTENANCE_QUEUE,
    TTL_SWEEP: MAINTENANCE_QUEUE,
    FLUSH_ACCESS: MAINTENANCE_QUEUE,
    EVICT: MAINTENANCE_QUEUE,
    OPTIMIZE: MAINTENANCE_QUEUE,
    # Both may call a model: they share the compaction queue's own concurrency.
    SESSION_FOLD: COMPACTION_QUEUE,
    SESSION_ENTITIES: COMPACTION_QUEUE,
}

DEAD_LETTER_QUEUES = frozenset({WRITE_QUEUE, COMPACTION_QUEUE, MAINTENANCE_QUEUE})
"""A task from these queues that fails for good is dead-lettered with its payload: it carried data or work."""
