"""200 calls started at once on one event loop, with a heartbeat coroutine timing the loop's turns.

Run by ``test_async_client`` in a process of its own (``python -m tests.integration.loop_probe``), with
``MEMORY_*`` pointing at a running worker; prints the results, the heartbeat's delays and the loop thread's CPU time per beat as JSON.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from memory_core import AsyncMemoryClient


async def probe() -> dict[str, Any]:
    delays: list[float] = []
    busy: list[
        float
    ] = []  # CPU time the loop's thread spent per beat: what the OS taking the core away adds nothing to
    stop = asyncio.Event()

    async def heartbeat() -> None:
        while not stop.is_set():
            start, start_cpu = time.perf_counter(), time.thread_time()
            await asyncio.sleep(0.001)
            delays.append(time.perf_counter() - start - 0.001)
            busy.append(time.thread_time() - start_cpu)

    async with AsyncMemoryClient.from_env() as client:
        memory = client.long_term("loop", "user-1")
        await memory.get_or_create_memory_set("facts", capacity=100_000, dedup="none")
        await memory.add("facts", [f"seed fact number {i}" for i in range(50)])
        await memory.search("facts", "seed fact", limit=3)  # first calls import and build what they need
        beat = asyncio.create_task(heartbeat())
        adds = [memory.add("facts", [f"new fact {i}"], ids=[f"new-{i}"]) for i in range(100)]
        searches = [memory.search("facts", f"fact number {i}", limit=3) for i in range(100)]
        try:
            added, found = await asyncio.gather(asyncio.gather(*adds), asyncio.gather(*searches))
        finally:
            stop.set()
            await beat
    return {"adds": added, "hits": [len(hits) for hits in found], "delays": delays, "busy": busy}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(probe())))
