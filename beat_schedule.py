"""Celery beat's schedule: data only (task names and intervals), no imports of ours.

``workers.app`` applies it, with intervals overridable from settings
(``MEMORY_COMPACTION__SWEEP_INTERVAL``). Maintenance tasks (TTL sweep, access-time
flush, eviction) are added here by the issues that build them.
"""

from __future__ import annotations

from typing import Any

BEAT_SCHEDULE: dict[str, dict[str, Any]] = {
    "compaction-sweep": {
        "task": "memory.compaction_sweep",
        "schedule": 300.0,
        "options": {"queue": "memory.maintenance"},
    },
}
