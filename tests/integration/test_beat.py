"""The schedule through real `celery beat` processes: two beats started by mistake still run one sweep a tick."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis

from memory_core.core.keys import Keys
from memory_core.core.settings import Settings
from memory_core.workers import services
from memory_core.workers.app import create_app

from .conftest import make_settings
from .in_thread import in_thread_worker
from .processes import PrivateRedis, celery_process

TICKS = 10
"""Sweeps decided (run or skipped) while both beats send, before the counts are read: about five seconds."""

INTERVALS = {
    "ttl_sweep_interval": 1,
    "flush_access_interval": 3600,
    "evict_interval": 3600,
}


@pytest.fixture
def sweeper(private_redis: PrivateRedis, tmp_path: Path) -> Iterator[Settings]:
    """A deployment of its own whose worker, like its beats, takes a TTL sweep tick to last a second (the
    session's worker holds a tick for its default minute)."""
    url = private_redis.database_url()
    settings = make_settings(
        url, tmp_path / "store", redis={"url": url}, embedder={"model": "hashing"}, maintenance=INTERVALS
    )
    app = create_app(settings)
    try:
        with in_thread_worker(app, concurrency=2):
            yield settings
    finally:
        services.close(app)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_beats_run_one_ttl_sweep_per_tick(sweeper: Settings, tmp_path: Path):
    env = {
        "MEMORY_REDIS__URL": sweeper.redis.url,
        "MEMORY_REDIS__KEY_PREFIX": sweeper.redis.key_prefix,
        "MEMORY_QDRANT__PATH": str(tmp_path / "unused"),  # beat never opens the store
        **{f"MEMORY_MAINTENANCE__{name.upper()}": str(seconds) for name, seconds in INTERVALS.items()},
        "MEMORY_COMPACTION__SWEEP_INTERVAL": "3600",
    }
    keys, stats = Keys(sweeper.redis.key_prefix), redis.Redis.from_url(sweeper.redis.url)

    def decided() -> tuple[int, int, bool]:
        """The TTL sweeps that ran, those skipped because their tick was taken, and whether a tick is taken."""
        with stats.pipeline() as pipe:
            pipe.hgetall(keys.maintenance_stats())
            pipe.exists(keys.sweep_lock("ttl_sweep"))
            counters, taken = pipe.execute()
        return int(counters.get(b"ttl_sweep:ran", 0)), int(counters.get(b"ttl_sweep:skipped", 0)), bool(taken)

    logs = [tmp_path / f"beat-{n}.log" for n in range(2)]
    quiet = time.monotonic()  # no beat yet: no sweep ran before this
    with ExitStack() as stack:
        for n, log in enumerate(logs):
            schedule = str(tmp_path / f"beat-{n}-schedule")
            stack.enter_context(celery_process("beat", env, log, "--schedule", schedule))
        # Counted once enough ticks were decided with both beats sending, however long a busy machine takes to
        # start them and run the sweeps. ``quiet`` is the last moment no sweep had begun: the first began after.
        deadline = time.monotonic() + 240
        both: int | None = None  # ticks decided when both beats were seen sending
        while True:
            now = time.monotonic()
            sending = all("Sending due task" in log.read_text(errors="replace") for log in logs)
            ran, skipped, taken = decided()
            if ran + skipped == 0 and not taken:
                quiet = now
            if both is None and sending:
                both = ran + skipped
            if both is not None and ran + skipped >= both + TICKS:
                break
            assert now < deadline, f"{ran} sweeps ran and {skipped} were skipped in 240 s (both sending: {sending})"
            time.sleep(0.1)
        ran, skipped, _ = decided()
        span = time.monotonic() - quiet
    stats.close()
    assert skipped >= 2, (ran, skipped)  # the second beat's sends found the tick taken
    # A sweep holds its tick's lock for the second the tick lasts: two sweeps are a second apart at least, so a
    # slow machine only widens the span. Two beats each getting a sweep would run two a second.
    assert ran <= span + 1, f"{ran} sweeps ran in {span:.1f} s: some tick ran twice ({skipped} skipped)"
