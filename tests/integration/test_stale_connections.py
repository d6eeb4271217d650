"""Pooled Redis connections that a restart left stale are replaced on their first use, not reported as an outage."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from memory_core import AsyncMemoryClient, BrokerUnavailable, MemoryClient
from memory_core.core.settings import Settings

from .processes import free_port, start_redis, stop

CONCURRENT = 8


def _settings(url: str) -> Settings:
    return Settings(_env_file=None, redis={"url": url, "socket_timeout": 2}, client={"timeout": 10})


def test_every_pooled_connection_recovers_on_its_first_use_after_a_redis_restart(tmp_path: Path):
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    server = start_redis(port, tmp_path / "redis.log")
    try:
        with MemoryClient(_settings(url)) as client, ThreadPoolExecutor(CONCURRENT) as threads:
            saver = client.checkpoints("stale")

            def put_and_list(n: int) -> int:
                saver.put(f"thread-{n}", {"step": n})
                return len(saver.list(f"thread-{n}"))

            async def async_round(aclient: AsyncMemoryClient) -> list[int | BaseException]:
                asaver = aclient.checkpoints("stale")

                async def one(n: int) -> int:
                    await asaver.put(f"athread-{n}", {"step": n})
                    return len(await asaver.list(f"athread-{n}"))

                return await asyncio.gather(*(one(n) for n in range(CONCURRENT)), return_exceptions=True)

            async def scenario() -> tuple[list[int | BaseException], list[int | BaseException]]:
                nonlocal server
                async with AsyncMemoryClient(_settings(url)) as aclient:
                    # Both pools hold several connections, all opened before the restart.
                    assert await async_round(aclient) == [1] * CONCURRENT
                    assert list(threads.map(put_and_list, range(CONCURRENT))) == [1] * CONCURRENT

                    stop(server)
                    server = start_redis(port, tmp_path / "redis.log")

                    after = await async_round(aclient)
                    sync_after: list[int | BaseException] = []
                    for future in [threads.submit(put_and_list, n) for n in range(CONCURRENT)]:
                        try:
                            sync_after.append(future.result())
                        except BrokerUnavailable as exc:
                            sync_after.append(exc)
                    return after, sync_after

            async_after, sync_after = asyncio.run(scenario())
    finally:
        stop(server)
    # The restarted Redis kept nothing: each call wrote and read back its own one checkpoint.
    assert async_after == [1] * CONCURRENT
    assert sync_after == [1] * CONCURRENT


@pytest.mark.parametrize("async_client", [False, True])
def test_a_real_outage_still_fails_fast(tmp_path: Path, async_client: bool):
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    server = start_redis(port, tmp_path / "redis.log")
    try:
        if async_client:

            async def scenario() -> None:
                async with AsyncMemoryClient(_settings(url)) as aclient:
                    saver = aclient.checkpoints("outage")
                    await saver.put("t", {"step": 1})
                    stop(server)
                    with pytest.raises(BrokerUnavailable, match=f"127.0.0.1:{port}"):
                        await saver.list("t")

            asyncio.run(scenario())
        else:
            with MemoryClient(_settings(url)) as client:
                saver = client.checkpoints("outage")
                saver.put("t", {"step": 1})
                stop(server)
                with pytest.raises(BrokerUnavailable, match=f"127.0.0.1:{port}"):
                    saver.list("t")
    finally:
        stop(server)
