"""Celery beat's schedule: data only (task names and intervals), no imports of ours.

Maintenance tasks (TTL sweep, access-time flush, eviction, compaction sweep) are
added here by the issues that build them; until then beat has nothing to run.
"""

from __future__ import annotations

from typing import Any

BEAT_SCHEDULE: dict[str, dict[str, Any]] = {}
