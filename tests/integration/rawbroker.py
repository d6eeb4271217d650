"""Publishing raw task messages straight to the broker, as a buggy or hostile producer would."""

from __future__ import annotations

import uuid
from typing import Any

from kombu import Connection

from memory_core.core.auth import AUTH_HEADER
from memory_core.core.dispatch import celery_message
from memory_core.core.messages import AddRequest, NewItem
from memory_core.core.models import utcnow
from memory_core.core.routing import ROUTES
from memory_core.core.settings import Settings


def publish_raw(
    settings: Settings,
    task: str,
    kwargs: dict[str, Any],
    *,
    task_id: str | None = None,
    serializer: str = "json",
    args: list[Any] | None = None,
    token: str | None = None,
    headers: dict[str, Any] | None = None,
) -> str:
    """Publishes one Celery protocol-2 message to the task's queue (this deployment's); returns its task id.

    ``args``: positional arguments (our client never sends any); ``token``: the auth header, as a client sets it;
    ``headers``: headers added to (or replacing) the client's.
    """
    task_id = task_id or str(uuid.uuid4())
    body, message_headers = celery_message(task, task_id, kwargs, "raw")
    message_headers.update(headers or {})
    if args is not None:
        body = (args, *body[1:])
    if token is not None:
        message_headers[AUTH_HEADER] = token
    options = {"global_keyprefix": settings.broker_key_prefix}
    with Connection(settings.broker_url, transport_options=options) as conn:
        conn.Producer().publish(
            body,
            exchange="",
            routing_key=ROUTES[task],
            serializer=serializer,
            headers=message_headers,
            correlation_id=task_id,
        )
    return task_id


def add_kwargs(namespace: str, item_id: str, value: str, *, key: str = "u", set_name: str = "notes") -> dict[str, Any]:
    """The kwargs of a memory.add task writing one text item, as the client would send them."""
    item = NewItem(id=item_id, value=value, created_time=utcnow(), seq=1)
    request = AddRequest(namespace=namespace, key=key, set_name=set_name, items=[item])
    return {"request": request.model_dump(mode="json")}
