"""The schedule through real `celery beat` processes: two beats started by mistake still run one sweep a tick."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from memory_core import MemoryClient
from memory_core.core.settings import Settings

from .processes import celery_process


@pytest.mark.slow
def test_two_beats_run_one_ttl_sweep_per_tick(client: MemoryClient, settings: Settings, raw_redis, tmp_path: Path):
    env = {
        "MEMORY_REDIS__URL": settings.redis.url,
        "MEMORY_REDIS__KEY_PREFIX": settings.redis.key_prefix,
        "MEMORY_QDRANT__PATH": str(tmp_path / "unused"),  # beat never opens the store
        "MEMORY_MAINTENANCE__TTL_SWEEP_INTERVAL": "1",
        "MEMORY_MAINTENANCE__FLUSH_ACCESS_INTERVAL": "3600",
        "MEMORY_MAINTENANCE__EVICT_INTERVAL": "3600",
        "MEMORY_COMPACTION__SWEEP_INTERVAL": "3600",
    }
    with ExitStack() as stack:
        for n in range(2):
            schedule = str(tmp_path / f"beat-{n}-schedule")
            stack.enter_context(celery_process("beat", env, tmp_path / f"beat-{n}.log", "--schedule", schedule))
        time.sleep(8)
    counters = {k.decode(): int(v) for k, v in raw_redis.hgetall(client.keys.maintenance_stats()).items()}
    ran, skipped = counters.get("ttl_sweep:ran", 0), counters.get("ttl_sweep:skipped", 0)
    assert ran + skipped >= 6, counters  # both beats were sending every second
    assert skipped >= 2, counters  # the second beat's sends found the tick taken
    assert ran <= 9, counters  # at most one sweep per one-second tick over ~8 s
