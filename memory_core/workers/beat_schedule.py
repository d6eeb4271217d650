"""Celery beat's schedule: data only (task names and default intervals in seconds), no imports of ours.

``memory_core.workers.app`` applies it, taking each interval from settings when one is set
(``MEMORY_MAINTENANCE__*_INTERVAL``, ``MEMORY_COMPACTION__SWEEP_INTERVAL``). Every
task here is single-flight per tick, so a second beat started by mistake does not
double the work.
"""

from __future__ import annotations

from typing import Any

BEAT_SCHEDULE: dict[str, dict[str, Any]] = {
    "ttl-sweep": {"task": "memory.ttl_sweep", "schedule": 60.0, "options": {"queue": "memory.maintenance"}},
    "flush-access": {"task": "memory.flush_access", "schedule": 30.0, "options": {"queue": "memory.maintenance"}},
    "evict": {"task": "memory.evict", "schedule": 120.0, "options": {"queue": "memory.maintenance"}},
    "optimize": {"task": "memory.optimize", "schedule": 600.0, "options": {"queue": "memory.maintenance"}},
    # Resumes a reindex whose batches stopped (a killed worker's part, a lost message); nothing when none runs.
    "reindex-kick": {
        "task": "memory.reindex",
        "schedule": 30.0,
        "kwargs": {"request": {"action": "kick"}},
        "options": {"queue": "memory.read"},
    },
    "compaction-sweep": {
        "task": "memory.compaction_sweep",
        "schedule": 300.0,
        "options": {"queue": "memory.maintenance"},
    },
    # Sends deferred formations again once their namespace has budget (a new UTC day, a raised budget).
    "formation-resume": {
        "task": "memory.formation_resume_due",
        "schedule": 300.0,
        "options": {"queue": "memory.maintenance"},
    },
}
