"""The worker app with acknowledgements held back: ``celery -A tests.faults.held_acks worker``.

Every ``memory.add`` task that starts while the file named by ``MEMORY_TEST_HOLD_FLAG`` exists, once
it has pushed its reply to the caller, waits ``MEMORY_TEST_HOLD_SECONDS`` before Celery acknowledges its
message (``task_postrun`` runs inside the task's trace; the late ack comes after it). That pins the
window a redelivery comes from: the caller holds an acknowledged reply, the broker an unacknowledged
message. A SIGKILL in it, or a visibility timeout shorter than it, hands the message out again.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from celery import signals

from memory_core.core import routing
from memory_core.workers.app import app

__all__ = ["app"]

_FLAG = Path(os.environ.get("MEMORY_TEST_HOLD_FLAG", "/nonexistent"))
_SECONDS = float(os.environ.get("MEMORY_TEST_HOLD_SECONDS", "0"))
_held: set[str] = set()


@signals.task_prerun.connect
def _hold_if_flagged(sender: Any = None, task_id: str = "", **_: Any) -> None:
    # Decided when the task starts: the test may remove the flag as soon as it has the reply.
    if getattr(sender, "name", None) == routing.ADD and _FLAG.exists():
        _held.add(task_id)


@signals.task_postrun.connect
def _hold_the_ack(task_id: str = "", **_: Any) -> None:
    if task_id in _held:
        _held.discard(task_id)
        time.sleep(_SECONDS)
