"""Celery beat's schedule lives in ``memory_core.workers.beat_schedule`` (data only), so it ships with the package.

This module keeps the repository's layout: it names the same schedule for readers and tools that look here.
"""

from memory_core.workers.beat_schedule import BEAT_SCHEDULE

__all__ = ["BEAT_SCHEDULE"]
