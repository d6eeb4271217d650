"""Task names and the queue each one goes to: the one table both the client and the workers read.

Names are explicit strings (``memory.<verb>``), never derived from module paths,
so tasks can move between modules without breaking queued messages.

``task_queues`` builds the queue declarations the client and the workers both make: on
RabbitMQ a queue declared twice with different arguments fails (``PRECONDITION_FAILED``),
so there is exactly one place that says what a queue is.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from kombu import Exchange, Queue

WRITE_QUEUE = "memory.write"
READ_QUEUE = "memory.read"
MAINTENANCE_QUEUE = "memory.maintenance"
COMPACTION_QUEUE = "memory.compaction"
FORMATION_QUEUE = "memory.formation"
QUEUES = (WRITE_QUEUE, READ_QUEUE, MAINTENANCE_QUEUE, COMPACTION_QUEUE, FORMATION_QUEUE)

AMQP_SCHEMES = frozenset({"amqp", "amqps", "pyamqp"})
TASK_EXCHANGE = "memory.tasks"
"""The exchange the task queues are bound to on RabbitMQ. A topic exchange: a task retried with a countdown
goes through the broker's delayed-delivery queues and comes back through it, instead of waiting in a worker
(holding one of its prefetch slots) until it is due, which is what a direct exchange would do."""

ADD = "memory.add"
DELETE = "memory.delete"
CREATE_SET = "memory.create_set"
DELETE_SET = "memory.delete_set"
FORGET = "memory.forget"
GET = "memory.get"
SEARCH = "memory.search"
BROWSE = "memory.browse"
EXPLAIN = "memory.explain"
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
REINDEX = "memory.reindex"
REINDEX_BATCH = "memory.reindex_batch"
FORM = "memory.form"
OPERATION = "memory.operation"
FACT_HISTORY = "memory.fact_history"
FORGET_SOURCES = "memory.forget_sources"
FORMATION_RESUME = "memory.formation_resume"
FORMATION_RESUME_DUE = "memory.formation_resume_due"
FORMATION_REPLAY = "memory.formation_replay"

OPS_NAMESPACE = "!ops"
"""Where replies to operator tasks that name no namespace (backup) go; no tenant can be named this."""
OPS_REPLIES = frozenset({BACKUP, REINDEX, REINDEX_BATCH})

ROUTES: dict[str, str] = {
    ADD: WRITE_QUEUE,
    DELETE: WRITE_QUEUE,
    CREATE_SET: WRITE_QUEUE,
    DELETE_SET: WRITE_QUEUE,
    FORGET: WRITE_QUEUE,
    GET: READ_QUEUE,
    SEARCH: READ_QUEUE,
    BROWSE: READ_QUEUE,
    EXPLAIN: READ_QUEUE,
    SIZE: READ_QUEUE,
    GET_SET: READ_QUEUE,
    RECALL: READ_QUEUE,
    LIST_SETS: READ_QUEUE,
    EXPORT: READ_QUEUE,
    IMPORT: WRITE_QUEUE,
    BACKUP: MAINTENANCE_QUEUE,
    # Starting, following and aborting a reindex answer at once, even while its batches fill the maintenance queue.
    REINDEX: READ_QUEUE,
    REINDEX_BATCH: MAINTENANCE_QUEUE,
    COMPACT: COMPACTION_QUEUE,
    COMPACTION_SWEEP: MAINTENANCE_QUEUE,
    TTL_SWEEP: MAINTENANCE_QUEUE,
    FLUSH_ACCESS: MAINTENANCE_QUEUE,
    EVICT: MAINTENANCE_QUEUE,
    OPTIMIZE: MAINTENANCE_QUEUE,
    # Model calls of their own queue: a slow model never delays adds and searches.
    FORM: FORMATION_QUEUE,
    OPERATION: READ_QUEUE,
    FACT_HISTORY: READ_QUEUE,
    FORGET_SOURCES: WRITE_QUEUE,
    FORMATION_RESUME: MAINTENANCE_QUEUE,
    FORMATION_RESUME_DUE: MAINTENANCE_QUEUE,
    FORMATION_REPLAY: MAINTENANCE_QUEUE,
    # Both may call a model: they share the compaction queue's own concurrency.
    SESSION_FOLD: COMPACTION_QUEUE,
    SESSION_ENTITIES: COMPACTION_QUEUE,
}

DEAD_LETTER_QUEUES = frozenset({WRITE_QUEUE, COMPACTION_QUEUE, MAINTENANCE_QUEUE, FORMATION_QUEUE})
"""A task from these queues that fails for good is dead-lettered with its payload: it carried data or work."""


def is_amqp(broker_url: str) -> bool:
    """Whether ``broker_url`` names an AMQP broker (RabbitMQ)."""
    return urlsplit(broker_url).scheme in AMQP_SCHEMES


def task_queues(broker_url: str) -> tuple[Queue, ...]:
    """The task queues as the client and the workers declare them on the broker at ``broker_url``.

    On AMQP (RabbitMQ) every queue is durable and a quorum queue (``x-queue-type: quorum``): replicated,
    written to disk before the publish is confirmed, and a message a consumer took stays in the queue
    until it is acknowledged, so a worker killed mid-task loses nothing (the broker redelivers it when
    the connection drops). Quorum queues take per-consumer prefetch only, never a channel-wide (global)
    one; the workers detect them and set it so. Deployments sharing a RabbitMQ are kept apart by vhost
    (one per deployment, in the broker URL): queue names carry no prefix there.

    On Redis the queues are plain lists under the deployment's key prefix, as kombu makes them.
    """
    if not is_amqp(broker_url):
        return tuple(Queue(name, routing_key=name) for name in QUEUES)
    exchange = Exchange(TASK_EXCHANGE, type="topic", durable=True)
    return tuple(
        Queue(
            name,
            exchange,
            routing_key=name,
            durable=True,
            auto_delete=False,
            queue_arguments={"x-queue-type": "quorum"},
        )
        for name in QUEUES
    )


def broker_options(broker_url: str) -> dict[str, Any]:
    """Transport options every connection to the broker at ``broker_url`` needs, on top of its own.

    On AMQP, publisher confirms: a publish returns only once the broker has the message (for a quorum
    queue: on a majority of its nodes, on disk), and raises if the broker refuses it.
    """
    return {"confirm_publish": True} if is_amqp(broker_url) else {}
