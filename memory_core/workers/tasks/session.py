"""Session tasks on the compaction queue (they may call a model): fold into the summary, update entities.

A caller usually waits on these (a strategy's ``save``), so a summarizer endpoint that refuses connections
fails them at once (``SummarizerUnavailable``, not retried); other summarizer failures retry with backoff.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from memory_core.core import routing
from memory_core.core.errors import SummarizerError, SummarizerUnavailable
from memory_core.workers.base import MemoryTask

_RETRIED = (*MemoryTask.autoretry_for, SummarizerError)
_NOT_RETRIED = (SummarizerUnavailable,)


@shared_task(
    name=routing.SESSION_FOLD, bind=True, base=MemoryTask, autoretry_for=_RETRIED, dont_autoretry_for=_NOT_RETRIED
)
def session_fold(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Fold a session's oldest unsummarized messages into its summary."""
    return self.services.sessions.fold(request).model_dump(mode="json")


@shared_task(
    name=routing.SESSION_ENTITIES, bind=True, base=MemoryTask, autoretry_for=_RETRIED, dont_autoretry_for=_NOT_RETRIED
)
def session_entities(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Update the entities an exchange mentions."""
    return self.services.sessions.entities(request).model_dump(mode="json")
