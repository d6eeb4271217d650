"""Formation tasks: forming facts on their own queue; an operation's state, a fact's history, erasure by source.

A formation that must wait (its scope, namespace or worker busy; the model rate-limited or overloaded) raises
``FormationBusy``: it is sent again after the wait it names, and such waits never count toward a dead letter
(see ``MemoryTask.retry``). A model that answers unusably twice fails it for good: dead-lettered with the
messages and the raw replies.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from memory_core.core import routing
from memory_core.core.errors import FormationBusy
from memory_core.workers.base import MemoryTask

_WAITS = (*MemoryTask.autoretry_for, FormationBusy)


@shared_task(name=routing.FORM, bind=True, base=MemoryTask, autoretry_for=_WAITS)
def form(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Form facts from messages into a set, exactly once per operation id."""
    return self.services.former.form(request).model_dump(mode="json")


@shared_task(name=routing.OPERATION, bind=True, base=MemoryTask)
def operation(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Where one formation operation stands."""
    return self.services.former.operation(request).model_dump(mode="json")


@shared_task(name=routing.FACT_HISTORY, bind=True, base=MemoryTask)
def fact_history(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """A fact's supersession chain, oldest first."""
    return self.services.provenance.history(request).model_dump(mode="json")


@shared_task(name=routing.FORGET_SOURCES, bind=True, base=MemoryTask, autoretry_for=_WAITS)
def forget_sources(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Erase messages from the facts that rest on them."""
    return self.services.provenance.forget_sources(request).model_dump(mode="json")


@shared_task(name=routing.FORMATION_RESUME, bind=True, base=MemoryTask)
def formation_resume(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Send a namespace's deferred operations again."""
    return self.services.former.resume(request).model_dump(mode="json")


@shared_task(name=routing.FORMATION_RESUME_DUE, bind=True, base=MemoryTask)
def formation_resume_due(self: MemoryTask) -> dict[str, Any]:
    """Beat: send deferred operations again where their namespace has budget."""
    return self.services.former.resume_due().model_dump(mode="json")


@shared_task(name=routing.FORMATION_REPLAY, bind=True, base=MemoryTask)
def formation_replay(self: MemoryTask, request: dict[str, Any]) -> dict[str, Any]:
    """Form again, with the model, the facts of a set that were kept verbatim."""
    return self.services.former.replay(request).model_dump(mode="json")
