"""Publishing raw task messages straight to the broker, as a buggy or hostile producer would."""

from __future__ import annotations

import uuid
from typing import Any

from kombu import Connection

from memory_core.dispatch import celery_message
from memory_core.routing import ROUTES


def publish_raw(
    broker_url: str,
    task: str,
    kwargs: dict[str, Any],
    *,
    task_id: str | None = None,
    serializer: str = "json",
) -> str:
    """Publishes one Celery protocol-2 message to the task's queue; returns its task id."""
    task_id = task_id or str(uuid.uuid4())
    body, headers = celery_message(task, task_id, kwargs, "raw")
    with Connection(broker_url) as conn:
        conn.Producer().publish(
            body, exchange="", routing_key=ROUTES[task], serializer=serializer, headers=headers, correlation_id=task_id
        )
    return task_id
