"""Write throughput and search latency through the full path, side by side with the embedder alone.

Measured in one run on the same texts:
  (a) the embedder alone at its best layout (the ceiling of the write path), on the template corpus and
  on real chat turns (../shared/data's datasets, when present), whose lengths vary,
  (b) client -> broker -> worker -> embed -> embedded Qdrant -> durable, in batched add calls,
  and search p50/p95 through the queue (client -> worker -> reply);
  then compaction of a set of --compaction-items: with the offline extractive summarizer, and with
  the real anthropic SDK against a fake Messages API on loopback (model calls and tokens per 1,000 items);
  then the doors: search and add p50/p95 through the sync client, the MCP server over stdio (the MCP
  SDK's own client) and the HTTP API (httpx), side by side on the same worker and set of --door-facts
  facts; and calls per second of AsyncMemoryClient from N coroutines against the sync client from N threads.

    ops/bench [--items 2000] [--batch 100] [--searches 200] [--compaction-items 1000] [--door-facts 200]
    ops/bench --doors    # the doors alone
    ops/bench --writes 3 [--broker redis,rabbitmq] [--batch-items 64,1024] [--write-cores 1,2,4]    # (a), (b)
      and (c) alone, three rounds, a worker per broker / batch size / core count side by side (ops/write_bench.py)
    ops/bench --scale 10000,100000,1000000    # cost as work grows, one embedded node (ops/scale.py)
    ops/bench --hybrid-scale 100000,1000000 [--keep]    # hybrid search's engine query as the store grows,
      on two vocabularies, the query plan before and now side by side (ops/hybrid_bench.py)
    ops/bench --profile-writes [--broker redis,rabbitmq]    # where the worker's CPU goes per add message
      (ops/write_profile.py)
    ops/bench --profile-search    # where a search's time goes, client to worker and back (ops/call_profile.py)
    ops/bench --profile-add    # where one add's time goes until stored, client to worker and back (ops/call_profile.py)
    ops/bench --rerank [SPEC]    # what reranking adds per search, beside none (ops/rerank_bench.py)
    ops/bench --reindex [--big-items 100000]    # a reindex's rate, and adds and searches during one (ops/reindex_bench.py)
    ops/bench --formation [EXCHANGES]    # formation lag, model calls and tokens from 50 sessions, and adds and
      searches with formation busy against idle (ops/formation_bench.py)
    ops/bench --console [ITEMS]    # the console's views on a set of 100,000 items: server time, page weight
    ops/bench --callers 4,16 [--rounds 2] [--embed-batch 8,32] [--batch-wait 0,50]    # concurrent callers
      adding one chat turn each until stored, beside the embedder alone, with the CPU an item by process
      (ops/callers_bench.py)
    ops/bench --mem0 [--items 20000] [--searches 200]    # against mem0 with the same embedder, side by side on
      real chat turns over 200 users: concurrent callers, fire-and-forget, sequential, search (ops/mem0_bench.py)
    ops/bench --embedder SPEC [--embedder-path DIR] [--embedder-base-url URL]    # another embedder
      (MEMORY_EMBEDDER__MODEL) in the worker and in (a), with every section but --scale
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import random
import shutil
import socket
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import qdrant_edge as qe
from benchkit import (
    SHARED_DATA,
    batched_adds,
    big_store,
    chat_turns,
    clear_embeddings,
    corpus,
    embed_rates,
    pair,
    percentile,
    rss_mb,
    single_adds,
    timed,
)
from mcp import ClientSession, StdioServerParameters, stdio_client
from stack import (
    ROOT,
    RUN_DIR,
    VENV_BIN,
    add_embedder_options,
    choose_embedder,
    clear_prefix,
    isolated_env,
    redis_server,
    worker,
)

from memory_core import (
    AsyncMemoryClient,
    CompactionConfig,
    LongTermMemory,
    MemoryClient,
    NoWorkerAvailable,
    load_settings,
)
from memory_core.core import routing
from memory_core.core.dispatch import open_redis
from memory_core.core.liveness import consumers
from memory_core.core.messages import CompactionReport
from memory_core.core.models import MemorySetItem, Scope
from memory_core.engine.embedders import EmbedderFingerprint, open_embedder
from memory_core.engine.stores import ItemRecord, point_id
from memory_core.engine.stores.base import to_payload
from memory_core.engine.stores.edge import DENSE, EdgeVectorStore
from memory_core.testing.fake_anthropic import FakeAnthropic


def _tagged(search: Callable[..., object], tag: str) -> Callable[[str], object]:
    """``search`` (limit 10) of each query with `` (tag)`` appended: a text no earlier call asked."""
    return lambda query: search(f"{query} ({tag})", limit=10)


def _ttl_sweep(count: int) -> tuple[float, float]:
    """Seconds to write ``count`` already-expired points to an embedded engine, and to sweep them."""
    store = EdgeVectorStore(RUN_DIR / "bench-ttl", collection="ttl", dimension=384)
    try:
        rng = np.random.default_rng(5)
        past = datetime.now(UTC) - timedelta(minutes=1)
        scope = Scope("bench", "ttl", "notes")
        started = time.perf_counter()
        for start in range(0, count, 2_000):
            vectors = rng.standard_normal((min(2_000, count - start), 384), dtype=np.float32)
            records = [
                ItemRecord(
                    item=MemorySetItem(
                        memory_set_name="notes",
                        id=str(start + i),
                        value=f"note {start + i}",
                        created_time=past,
                        last_accessed_time=past,
                        expires_at=past,
                    ),
                    seq=start + i,
                    vector=vector,
                )
                for i, vector in enumerate(vectors)
            ]
            store.upsert(scope, records)
        write_s = time.perf_counter() - started
        started = time.perf_counter()
        swept = store.delete_expired(time.time(), count)
        sweep_s = time.perf_counter() - started
        assert swept == count
        assert store.count(scope) == 0
        return write_s, sweep_s
    finally:
        store.close()


_WRITES = ("new", "newer", "replayed", "delete")


def _conditional_writes(count: int, batch: int) -> dict[str, float]:
    """Items/s into the embedded engine, the same points each way, measured side by side: plain upserts and
    deletes (what writes were before they became monotonic) against the store's monotonic ones (what is
    stored read and compared by ``seq`` first; a delete writes a tombstone), in batches of ``batch``."""
    rng = np.random.default_rng(9)
    scope = Scope("bench", "cond", "notes")
    now = datetime.now(UTC)
    records = [
        ItemRecord(
            item=MemorySetItem(
                memory_set_name="notes", id=str(i), value=f"note {i}", created_time=now, last_accessed_time=now
            ),
            seq=1_700_000_000_000_000_000 + i,
            vector=rng.standard_normal(384, dtype=np.float32).tolist(),
        )
        for i in range(count)
    ]

    def version(shift: int) -> dict[str, tuple[int, qe.Point]]:
        """Every record as a point, its seq moved on by ``shift``."""
        return {
            point_id(scope, r.item.id): (
                r.seq + shift,
                qe.Point(
                    point_id(scope, r.item.id),
                    {DENSE: [float(x) for x in r.vector]},
                    {**to_payload(scope, r), "seq": r.seq + shift},
                ),
            )
            for r in records
        }

    # New items; a newer version of each (it applies); the same version again (a replay: nothing does).
    phases = {"new": version(0), "newer": version(count), "replayed": version(count)}
    pids = list(phases["new"])
    rates: dict[str, float] = {}
    for kind in ("plain", "monotonic"):
        shutil.rmtree(RUN_DIR / f"bench-{kind}", ignore_errors=True)
        store = EdgeVectorStore(RUN_DIR / f"bench-{kind}", collection="c", dimension=384)
        try:
            for rewrite, points in phases.items():
                started = time.perf_counter()
                for start in range(0, count, batch):
                    part = {pid: points[pid] for pid in pids[start : start + batch]}
                    if kind == "monotonic":
                        store._write_newer(part, deleting=False)  # the store's write path, minus building points
                    else:
                        store._items.update(qe.UpdateOperation.upsert_points([p for _, p in part.values()]))
                rates[f"{kind} {rewrite}"] = count / (time.perf_counter() - started)
            started = time.perf_counter()
            for start in range(0, count, batch):
                ids = [r.item.id for r in records[start : start + batch]]
                if kind == "monotonic":
                    store.delete(scope, dict.fromkeys(ids, records[-1].seq + 1))
                else:
                    store._items.update(qe.UpdateOperation.delete_points([point_id(scope, i) for i in ids]))
            rates[f"{kind} delete"] = count / (time.perf_counter() - started)
        finally:
            store.close()
            shutil.rmtree(RUN_DIR / f"bench-{kind}", ignore_errors=True)
    return rates


def _big_search(
    env: dict[str, str], count: int, queries: list[str], model_name: str, fingerprint: EmbedderFingerprint
) -> dict[str, Any]:
    """Hybrid search through the queue on a ``count``-item set (every query new: cache misses); worker RSS."""
    path = RUN_DIR / "bench-big"
    write_s = big_store(path, count, model_name, fingerprint)
    big_env = {**env, "MEMORY_QDRANT__PATH": str(path), "MEMORY_REDIS__KEY_PREFIX": "benchbig"}
    os.environ.update(big_env)
    settings = load_settings()
    with worker(big_env, name="bench-big-worker") as process, MemoryClient(settings) as client:
        clear_prefix(settings.redis.url, settings.redis.key_prefix)
        notes = client.long_term("bench", "big").get_memory_set("notes")
        notes.search("warm-up query", limit=10)
        rss = [rss_mb(process.pid)]
        rounds = [timed(_tagged(notes.search, f"round {r}"), queries) for r in range(3)]
        rss.append(rss_mb(process.pid))
        dense = timed(lambda q: notes.search(f"{q} (dense)", limit=10, mode="dense"), queries)
        rss.append(rss_mb(process.pid))
        # A write into a set this large must not cost in proportion to its size (no exact count per write).
        notes.add(["warm-up write"])
        adds = timed(lambda q: notes.add([f"{q} (written)"]), queries)
    return {"write_s": write_s, "hybrid": rounds[0], "rounds": rounds, "dense": dense, "rss": rss, "adds": adds}


def _compaction(client: MemoryClient, texts: list[str], name: str) -> tuple[CompactionReport, float]:
    """Fills a set with ``texts`` (below its capacity, so nothing triggers), then times one compaction."""
    ltm = client.long_term("bench", "compaction")
    ltm.delete_memory_set(name)
    memory_set = ltm.get_or_create_memory_set(
        name, capacity=len(texts) + 1, compaction_config=CompactionConfig(limit=10)
    )
    for start in range(0, len(texts), 500):
        memory_set.add(texts[start : start + 500])
    started = time.perf_counter()
    report = ltm.compact(memory_set, timeout=900)
    return report, time.perf_counter() - started


def _tiers(client: MemoryClient, queries: list[str]) -> dict[str, list[float]]:
    """Latencies (ms) of the volatile tiers and of recall, on the loaded 'bench' key."""
    timings: dict[str, list[float]] = {name: [] for name in ("persist", "cold", "save", "window", "recall")}

    def timed(name: str, call: Callable[[], object]) -> None:
        started = time.perf_counter()
        call()
        timings[name].append((time.perf_counter() - started) * 1000)

    for run in range(50):
        stm = client.short_term("bench", "k")
        for field in range(20):
            stm.set(f"state.f{field}", f"value {run} {field}")
        timed("persist", stm.persist)
        timed("cold", lambda: client.short_term("bench", "k").get("state.f7"))  # one HGETALL, then local
    session = client.session("bench", "chat", key="k")
    memory, window = session.buffer(), session.window(k=5)
    for turn in range(50):
        timed("save", functools.partial(memory.save, {"input": f"question {turn}"}, {"output": f"answer {turn}"}))
        timed("window", lambda: window.load({"input": "next"}))
    for query in queries[:50]:
        timed("recall", functools.partial(client.recall, "bench", "k", query, session_id="chat", limit=10))
    return timings


DOORS = ("client", "mcp", "http")
DOORS_NAMESPACE = "bench-doors"
DOORS_SET = "facts"
DOORS_CAPACITY = 100_000


def _doors(client: MemoryClient, env: dict[str, str], facts: int, calls: int) -> dict[str, list[float]]:
    """Latencies (ms) through two doors to one worker and one set of ``facts`` facts: the sync client, and the
    MCP server (``memory-core mcp``) spawned over stdio and called with the MCP SDK's own client.

    ``calls`` searches (limit 5), then ``calls`` adds of one text until durable, through both doors in turn.
    Every query and added text is new to the run (one base text per pair, tagged with its door), so each
    call misses the client's caches and the worker's embedding cache, which stay on.
    """
    ltm = client.long_term(DOORS_NAMESPACE, "k")
    ltm.get_or_create_memory_set(DOORS_SET, capacity=DOORS_CAPACITY)
    texts = corpus(facts + calls, seed=13)
    ltm.add(DOORS_SET, texts[:facts], wait=True)
    # Query texts never stored ("(note i)" stripped), each base text once.
    queries = list(dict.fromkeys(t.rsplit(" (", 1)[0] for t in corpus(calls * 4, seed=17)))[:calls]
    server_env = {  # the environment the worker gets (the SDK passes only a few variables of its own)
        **os.environ,
        **env,
        "MEMORY_MCP__NAMESPACE": DOORS_NAMESPACE,
        "MEMORY_MCP__KEY": "k",
        "MEMORY_MCP__SET_NAME": DOORS_SET,
        "MEMORY_MCP__SET_CAPACITY": str(DOORS_CAPACITY),
    }
    port = free_port()
    serve = [str(VENV_BIN / "memory-core"), "serve", "--dev", "--port", str(port)]
    with (RUN_DIR / "bench-http.log").open("w") as log:
        server = subprocess.Popen(serve, cwd=ROOT, env=server_env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}", server)
        base = f"http://127.0.0.1:{port}/v1/namespaces/{DOORS_NAMESPACE}/keys/k/sets/{DOORS_SET}"
        return asyncio.run(_through_doors(ltm, server_env, base, {"search": queries, "add": texts[facts:]}))
    finally:
        server.terminate()
        server.wait(timeout=20)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_healthy(url: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and server.poll() is None:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise SystemExit(f"memory-core serve did not come up; see {RUN_DIR / 'bench-http.log'}")


async def _through_doors(
    ltm: LongTermMemory, server_env: dict[str, str], base: str, texts: dict[str, list[str]]
) -> dict[str, list[float]]:
    params = StdioServerParameters(command=str(VENV_BIN / "memory-core"), args=["mcp"], env=server_env, cwd=ROOT)
    timings: dict[str, list[float]] = {f"{door} {op}": [] for op in texts for door in DOORS}
    with (RUN_DIR / "bench-mcp.log").open("w") as log:
        async with (
            stdio_client(params, errlog=log) as (read, write),
            ClientSession(read, write) as session,
            httpx.AsyncClient(base_url=base, timeout=60) as http,
        ):
            await session.initialize()

            async def tool(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
                result = await session.call_tool(name, arguments)
                data: dict[str, Any] | None = result.structured_content
                if result.is_error or data is None:
                    raise SystemExit(f"the MCP server's {name} failed: {result.content}")
                return data

            # Each call returns how many results it got: 5 found, or 1 id stored.
            async def client_search(query: str) -> int:
                return len(ltm.search(DOORS_SET, query, limit=5))

            async def mcp_search(query: str) -> int:
                return len((await tool("search_memory", {"query": query, "limit": 5}))["memories"])

            async def client_add(text: str) -> int:
                return len(ltm.add(DOORS_SET, [text], wait=True))

            async def http_search(query: str) -> int:
                answer = await http.post("/search", json={"query": query, "limit": 5})
                return len(answer.raise_for_status().json()["items"])

            async def http_add(text: str) -> int:
                answer = await http.post("/items", json={"items": [text]})
                return len(answer.raise_for_status().json()["ids"])

            async def mcp_add(text: str) -> int:
                return len((await tool("add_memory", {"texts": [text]}))["ids"])

            searches: dict[str, Door] = {"client": client_search, "mcp": mcp_search, "http": http_search}
            adds: dict[str, Door] = {"client": client_add, "mcp": mcp_add, "http": http_add}
            await _in_turn("search", searches, texts["search"], 5, timings)
            await _in_turn("add", adds, texts["add"], 1, timings)
    return timings


Door = Callable[[str], Awaitable[int]]


async def _in_turn(
    op: str, doors: dict[str, Door], texts: list[str], expected: int, timings: dict[str, list[float]]
) -> None:
    """Each text through every door in turn (the order rotates), timed; each call must return ``expected``."""
    for door, call in doors.items():  # a server's first call connects its own client
        await call(f"warm-up {op} ({door})")
    for i, text in enumerate(texts):
        # The same base text through each door, tagged so none finds it cached.
        turn = [(door, call, f"{text} ({door})") for door, call in doors.items()]
        for door, call, tagged in turn[i % 3 :] + turn[: i % 3]:
            started = time.perf_counter()
            got = await call(tagged)
            timings[f"{door} {op}"].append((time.perf_counter() - started) * 1000)
            assert got == expected, f"{door} {op} returned {got} results, not {expected}"


CONCURRENCY = (1, 8, 32)


def _concurrency(client: MemoryClient, calls: int) -> list[tuple[int, str, float, float]]:
    """Calls per second of the sync client from N threads and of ``AsyncMemoryClient`` from N coroutines,
    for searches and one-text adds (until durable), each N side by side on one worker.

    Every query and text is new (tagged with the client and N), so no cache answers for either.
    """
    ltm = client.long_term(DOORS_NAMESPACE, "k")
    base = [t.rsplit(" (", 1)[0] for t in corpus(calls, seed=23)]
    rows = []
    for n in CONCURRENCY:
        for op in ("search", "add"):
            texts = {door: [f"{t} ({door} {n} {i})" for i, t in enumerate(base)] for door in ("sync", "async")}
            call: Callable[[str], object] = (
                functools.partial(ltm.search, DOORS_SET, limit=5)
                if op == "search"
                else lambda text: ltm.add(DOORS_SET, [text], wait=True)
            )
            started = time.perf_counter()
            with ThreadPoolExecutor(n) as pool:
                list(pool.map(call, texts["sync"]))
            threads = calls / (time.perf_counter() - started)
            coroutines = asyncio.run(_async_rate(client.settings, op, texts["async"], n))
            rows.append((n, op, threads, coroutines))
    return rows


async def _async_rate(settings: Any, op: str, texts: list[str], n: int) -> float:
    async with AsyncMemoryClient(settings) as aclient:
        ltm = aclient.long_term(DOORS_NAMESPACE, "k")
        await ltm.get_memory_set(DOORS_SET)  # the definition, cached as the sync client has it
        queue = iter(texts)

        async def runner() -> None:
            for text in queue:
                if op == "search":
                    await ltm.search(DOORS_SET, text, limit=5)
                else:
                    await ltm.add(DOORS_SET, [text], wait=True)

        started = time.perf_counter()
        await asyncio.gather(*(runner() for _ in range(n)))
        return len(texts) / (time.perf_counter() - started)


def _print_concurrency(rows: list[tuple[int, str, float, float]], calls: int) -> None:
    print(
        f"\nmemory-core bench, concurrency: {calls} calls per cell, sync client from N threads vs AsyncMemoryClient "
        "from N coroutines on one loop, side by side; every text new (no cache hits)\n"
    )
    print("| N | op | sync, N threads (calls/s) | async, N coroutines (calls/s) | async / sync |")
    print("|---|---|---|---|---|")
    for n, op, threads, coroutines in rows:
        print(f"| {n} | {op} | {threads:.0f} | {coroutines:.0f} | {coroutines / threads:.2f} |")


def _print_doors(doors: dict[str, list[float]], facts: int) -> None:
    searches, adds = len(doors["client search"]), len(doors["client add"])
    print(
        f"\nmemory-core bench, doors: one worker, a {facts}-fact set, {searches} searches and {adds} adds through "
        f"each door, interleaved ({os.cpu_count()} cores)\n"
        "Caches on; every query and added text is new to the run (the same base text per pair, tagged with its "
        "door), so every call misses the client's read caches and the worker's embedding cache.\n"
    )
    labels = {
        "client search": "`long_term(ns, key).search(set, query, limit=5)`",
        "mcp search": "`search_memory` (limit 5)",
        "http search": "`POST .../sets/{set}/search` (limit 5)",
        "client add": "`add(set, [text], wait=True)`, until durable",
        "mcp add": "`add_memory` of one text, until durable",
        "http add": "`POST .../sets/{set}/items` of one text, until durable",
    }
    doors_named = {
        "client": "Python client (sync)",
        "mcp": "MCP server (stdio, SDK `ClientSession`)",
        "http": "HTTP API (`memory-core serve`, httpx)",
    }
    print("| door | op | p50 ms | p95 ms | overhead p50 vs client |")
    print("|---|---|---|---|---|")
    for op in ("search", "add"):
        base = statistics.median(doors[f"client {op}"])
        for door in DOORS:
            values = doors[f"{door} {op}"]
            p50 = statistics.median(values)
            overhead = f"{p50 - base:+.2f} ms (x{p50 / base:.2f})" if door != "client" else ""
            print(
                f"| {doors_named[door]} | {labels[f'{door} {op}']} | {p50:.2f} | {percentile(values, 0.95):.2f} "
                f"| {overhead} |"
            )


def _only_doors(args: argparse.Namespace) -> None:
    """``--doors``: the doors section alone, on a worker of its own."""
    env = isolated_env("bench")
    settings = load_settings()
    with redis_server(settings.redis.url), worker(env, name="bench-worker"), MemoryClient(settings) as client:
        clear_prefix(settings.redis.url, settings.redis.key_prefix)
        doors = _doors(client, env, args.door_facts, args.searches)
        rates = _concurrency(client, args.searches)
    _print_doors(doors, args.door_facts)
    _print_concurrency(rates, args.searches)


def _only_scale(args: argparse.Namespace) -> None:
    if args.hybrid_scale:  # the engine in this process: no worker, no Redis
        import hybrid_bench

        hybrid_bench.run(
            [int(size) for size in args.hybrid_scale.split(",")], args.searches, keep=args.keep, before=args.before
        )
        return
    import scale

    with redis_server(load_settings().redis.url):
        scale.run([int(size) for size in args.scale.split(",")], searches=min(args.searches, 100))


def _only_module(args: argparse.Namespace) -> bool:
    """Runs the section a bench module of its own measures, if one was asked for (True then)."""
    if args.profile_writes:
        import write_profile

        with redis_server(load_settings().redis.url):
            write_profile.run(args.items, args.batch, args.broker)
    elif args.profile_search:
        import call_profile

        with redis_server(load_settings().redis.url):
            call_profile.run(args.items, args.searches)
    elif args.profile_add:
        import call_profile

        with redis_server(load_settings().redis.url):
            call_profile.run_adds(args.items, args.searches)
    elif args.rerank is not None:
        import rerank_bench

        rerank_bench.run(args.rerank, args.items, args.searches)
    elif args.reindex:
        import reindex_bench

        with redis_server(load_settings().redis.url):
            reindex_bench.run(args.big_items, min(args.searches, 200))
    elif args.formation is not None:
        import formation_bench

        formation_bench.run(args.formation)
    elif args.console is not None:
        import console_bench

        with redis_server(load_settings().redis.url):
            console_bench.run(args.console)
    elif args.callers:
        import callers_bench

        callers_bench.run(args)
    elif args.mem0:
        import mem0_bench

        items = args.items if args.items_given else mem0_bench.ITEMS
        mem0_bench.run(items, args.batch, args.searches)  # in mem0's own venv: this process ends there
    else:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, help="items written (2000; --mem0: 20000)")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--compaction-items", type=int, default=1000)
    parser.add_argument("--ttl-items", type=int, default=100_000)
    parser.add_argument("--big-items", type=int, default=100_000)
    parser.add_argument("--conditional-items", type=int, default=5_000)
    parser.add_argument("--door-facts", type=int, default=200)
    parser.add_argument("--doors", action="store_true", help="run only the doors section (client vs MCP server)")
    parser.add_argument(
        "--scale",
        metavar="SIZES",
        help="run only the scale table (ops/scale.py) at these item counts, e.g. 10000,100000,1000000",
    )
    parser.add_argument(
        "--hybrid-scale",
        metavar="SIZES",
        help="run only hybrid search's engine query at these item counts (ops/hybrid_bench.py), e.g. 100000,1000000",
    )
    parser.add_argument(
        "--keep", action="store_true", help="with --hybrid-scale: keep the stores written, and reuse kept ones"
    )
    parser.add_argument(
        "--before",
        type=Path,
        metavar="DIR",
        help="with --hybrid-scale: also search through a worker running the memory_core package in DIR",
    )
    parser.add_argument(
        "--writes",
        type=int,
        metavar="ROUNDS",
        help="run only the write throughput, (a), (b) and (c), this many rounds in turn (ops/write_bench.py)",
    )
    parser.add_argument(
        "--broker",
        default="redis",
        metavar="BROKERS",
        help="with --writes or --profile-writes: the brokers to compare, a worker each (redis, rabbitmq, or both)",
    )
    parser.add_argument(
        "--batch-items",
        metavar="SIZES",
        help="with --writes: MEMORY_BATCHING__MAX_ITEMS values to compare, a worker each (e.g. 64,1024)",
    )
    parser.add_argument(
        "--batch-wait",
        metavar="MS",
        help="with --writes or --callers: MEMORY_BATCHING__MAX_WAIT_MS values to compare, a worker each (e.g. 0,50)",
    )
    parser.add_argument(
        "--write-cores",
        metavar="COUNTS",
        help="with --writes or --callers: MEMORY_BATCHING__THREADS values to compare, (a) at the same thread count (e.g. 1,2,4)",
    )
    parser.add_argument(
        "--callers",
        metavar="COUNTS",
        help="run only concurrent callers against the embedder alone (ops/callers_bench.py): these thread counts "
        "(e.g. 4,16) each adding one chat turn per call until stored, with the CPU an item by process; compares "
        "--embed-batch, --batch-wait and --write-cores values, a worker each",
    )
    parser.add_argument("--rounds", type=int, default=2, help="with --callers: rounds, the order rotating each round")
    parser.add_argument(
        "--embed-batch",
        metavar="SIZES",
        help="with --callers: MEMORY_EMBEDDER__BATCH_SIZE values to compare, a worker each (e.g. 8,32)",
    )
    parser.add_argument(
        "--embed-threads",
        metavar="COUNTS",
        help="with --callers: MEMORY_EMBEDDER__THREADS values to compare, a worker each (e.g. 1,2)",
    )
    parser.add_argument(
        "--profile-search",
        action="store_true",
        help="run only where a search's time goes, client -> broker -> worker -> embed -> engine -> reply "
        "(ops/call_profile.py)",
    )
    parser.add_argument(
        "--profile-add",
        action="store_true",
        help="run only where one add's time goes until stored (--searches adds of a chat turn each, after --items "
        "turns over 200 users), client -> broker -> worker -> batch thread -> embed -> engine -> reply "
        "(ops/call_profile.py)",
    )
    parser.add_argument(
        "--profile-writes",
        action="store_true",
        help="run only the worker CPU profile per add message (ops/write_profile.py)",
    )
    parser.add_argument(
        "--rerank",
        nargs="?",
        const="",
        metavar="SPEC",
        help="run only the latency reranking adds per search (ops/rerank_bench.py), with this MEMORY_RERANK__MODEL "
        "(default: a rerank endpoint on loopback)",
    )
    parser.add_argument(
        "--reindex",
        action="store_true",
        help="run only the reindex section (ops/reindex_bench.py): its rate on --big-items items, and one-item adds "
        "and searches during it against none",
    )
    parser.add_argument(
        "--formation",
        nargs="?",
        type=int,
        const=300,
        metavar="EXCHANGES",
        help="run only the formation section (ops/formation_bench.py): 50 sessions save this many exchanges in all "
        "(default 300) against a fake Messages API; formation lag, model calls and tokens, and adds and searches "
        "with formation busy against idle",
    )
    parser.add_argument(
        "--console",
        type=int,
        nargs="?",
        const=100_000,
        default=None,
        metavar="ITEMS",
        help="run only the console's views on a set of ITEMS items (100000): server time and page weight "
        "(ops/console_bench.py)",
    )
    parser.add_argument(
        "--mem0",
        action="store_true",
        help="run only memory-core against mem0 with the same embedder (ops/mem0_bench.py): --items chat turns "
        "(20000) over 200 users from 4 and 16 threads, fire-and-forget and sequential adds, and --searches questions "
        "at a tenth of the items and at all of them, against mem0 on qdrant-client's local store and on FAISS",
    )
    add_embedder_options(parser)
    args = parser.parse_args()
    args.items_given = args.items is not None
    if args.items is None:
        args.items = 2000
    if args.scale and (args.embedder or args.embedder_path or args.embedder_base_url):
        parser.error("--scale measures the store with stand-in vectors of the shipped model; --embedder does not apply")
    choose_embedder(args)  # before any worker starts: isolated_env hands the choice on
    if _only_module(args):
        return
    if args.scale or args.hybrid_scale:
        _only_scale(args)
        return
    if args.doors:
        _only_doors(args)
        return
    if args.writes:
        import write_bench

        write_bench.run(args)
        return

    env = isolated_env("bench")
    shutil.rmtree(RUN_DIR / "bench-ttl", ignore_errors=True)
    settings = load_settings()
    texts = corpus(args.items)

    # (a) the embedder alone, as the worker runs it (same threads and batch size), on the same texts.
    embedder = open_embedder(settings.embedder)
    model_name, fingerprint = embedder.model_name, embedder.fingerprint
    rates = embed_rates(embedder, texts, settings)
    embed_rate = max(rates.values())
    chat = chat_turns(args.items)  # and on real chat text, whose lengths vary as the template corpus's do not
    chat_rate = max(embed_rates(embedder, chat, settings).values()) if chat else float("nan")
    single = []
    for text in texts[:50]:
        t0 = time.perf_counter()
        embedder.embed([text])
        single.append((time.perf_counter() - t0) * 1000)
    query_embed_ms = statistics.median(single)
    del embedder

    with redis_server(settings.redis.url), worker(env, name="bench-worker"), MemoryClient(settings) as client:
        clear_prefix(settings.redis.url, settings.redis.key_prefix)
        notes = client.long_term("bench", "k").get_or_create_memory_set("notes", capacity=1_000_000)
        notes.add(texts[:32], ids=[f"warm-{i}" for i in range(32)])  # worker warm-up (model load)
        notes.delete()

        # (b) one add per item from 4 client threads; (c) batched add calls; same texts, no cached embeddings.
        single_rate = single_adds(client, texts)
        clear_embeddings(settings.redis.url, settings.redis.key_prefix)
        full_rate = batched_adds(client, texts, args.batch)

        # Distinct queries: every first search is a cache miss (through the queue); the same queries
        # again from this client hit L1; from a fresh client (empty L1) they hit L2.
        # Query texts never embedded before (no "(note i)"), so a miss pays for its query embedding.
        prefixes = list(dict.fromkeys(t.rsplit(" (", 1)[0] for t in texts))
        queries = random.Random(11).sample(prefixes, min(args.searches, len(prefixes)))
        latencies = timed(lambda q: notes.search(q, limit=10), queries)
        l1_latencies = timed(lambda q: notes.search(q, limit=10), queries)
        with MemoryClient(settings) as fresh:
            other = fresh.long_term("bench", "k")
            l2_latencies = timed(lambda q: other.search("notes", q, limit=10), queries)
            assert fresh.stats().l2_hits == len(queries), "every search of the fresh client must hit L2"
        tiers = _tiers(client, [q + " (again)" for q in queries])  # new query texts: no cached search or embedding
        extractive, extractive_s = _compaction(client, texts[: args.compaction_items], "extractive")
        # What the liveness check costs a call when its cached answer is stale (at most once a beat per queue).
        heartbeats = open_redis(settings)
        check_ms = timed(lambda q: consumers(heartbeats, client.keys, routing.READ_QUEUE), queries[:100])
        heartbeats.close()
        doors = _doors(client, env, args.door_facts, args.searches)

    # The worker is gone (it withdrew its heartbeat on its way out): how long until a caller is told.
    with redis_server(settings.redis.url), MemoryClient(settings) as idle:
        started, no_worker_s = time.perf_counter(), float("nan")
        try:
            idle.long_term("bench", "k").size("notes")
        except NoWorkerAvailable:
            no_worker_s = time.perf_counter() - started

    ttl_write_s, ttl_sweep_s = _ttl_sweep(args.ttl_items)
    conditional = {size: _conditional_writes(args.conditional_items, size) for size in (1, args.batch)}
    big = _big_search(env, args.big_items, queries[:100], model_name, fingerprint)

    with FakeAnthropic() as fake:
        fake_env = {**env, "MEMORY_ANTHROPIC__API_KEY": "sk-ant-bench-fake", "MEMORY_ANTHROPIC__BASE_URL": fake.url}
        os.environ.update(fake_env)
        with worker(fake_env, name="bench-worker-claude"), MemoryClient(load_settings()) as client:
            claude, claude_s = _compaction(client, texts[: args.compaction_items], "claude")

    print(
        f"\nmemory-core bench: {len(texts)} items, batches of {args.batch}, {args.searches} searches "
        f"({os.cpu_count()} cores, embedder threads={settings.embedder.threads})\nembedder: {fingerprint.describe()}\n"
    )
    print("| measure | value |")
    print("|---|---|")
    for threads, rate in rates.items():
        print(f"| embedder alone, {threads} thread(s), batch {settings.embedder.batch_size} | {rate:.0f} items/s |")
    print(f"| (a) embedder ceiling, template corpus: the best of those | {embed_rate:.0f} items/s |")
    print(
        f"| (a) embedder ceiling on {len(chat)} chat turns of {SHARED_DATA} (equal shares of each dataset; "
        f"the ratios below are to the template corpus's, the texts (b) and (c) add) | {chat_rate:.0f} items/s |"
    )
    print(f"| (b) full path, one add() per item from 4 client threads, until durable | {single_rate:.0f} items/s |")
    print(f"| (c) full path, add() of {args.batch}, until durable | {full_rate:.0f} items/s |")
    print(f"| ratio (b)/(a) | {single_rate / embed_rate:.2f} |")
    print(f"| ratio (c)/(a) | {full_rate / embed_rate:.2f} |")
    print(f"| search, cache miss (through the queue), p50 / p95 | {pair(latencies)} |")
    print(f"| search, L2 hit (Redis, another client), p50 / p95 | {pair(l2_latencies)} |")
    print(f"| search, L1 hit (this process), p50 / p95 | {pair(l1_latencies)} |")
    print(f"| of which: one query embedding, p50 | {query_embed_ms:.1f} ms |")
    print(f"| liveness check (read of the heartbeats, once a beat per queue), p50 / p95 | {pair(check_ms)} |")
    print(f"| a call with no worker running: NoWorkerAvailable after | {no_worker_s:.2f} s |")
    print(
        f"| TTL sweep of {args.ttl_items:,} expired items, embedded engine | {ttl_sweep_s:.2f} s "
        f"(writing them took {ttl_write_s:.1f} s) |"
    )
    print(f"| short-term: persist 20 fields (one MULTI), p50 / p95 | {pair(tiers['persist'])} |")
    print(f"| short-term: first read of a state (one HGETALL), p50 / p95 | {pair(tiers['cold'])} |")
    print(f"| session: save() of one exchange (XADD + promotion task), p50 / p95 | {pair(tiers['save'])} |")
    print(f"| session: window(k=5).load(), p50 / p95 | {pair(tiers['window'])} |")
    print(f"| recall over 3 tiers ({len(texts)}-item set + state + session), p50 / p95 | {pair(tiers['recall'])} |")
    ratio = statistics.median(tiers["recall"]) / statistics.median(latencies)
    print(f"| recall p50 / search-miss p50 | {ratio:.2f} |")
    print(
        f"| hybrid search on a {args.big_items:,}-item set, through the queue, p50 / p95 | {pair(big['hybrid'])} "
        f"(p50 minus the query embedding: {statistics.median(big['hybrid']) - query_embed_ms:.1f} ms) |"
    )
    print(f"| dense search on the same set, p50 / p95 | {pair(big['dense'])} |")
    print(f"| add() of one item into the same set, until durable, p50 / p95 | {pair(big['adds'])} |")
    print(
        f"| worker RSS with the {args.big_items:,}-item set: after warm-up / 3 x {len(big['hybrid'])} searches / "
        f"{len(big['dense'])} more | {' / '.join(f'{r:.0f} MB' for r in big['rss'])} |"
    )
    print(
        f"| (writing the {args.big_items:,} items straight into the engine and building its index took "
        f"{big['write_s']:.1f} s) | |"
    )
    for size, by_write in conditional.items():
        pairs = [f"{what} {by_write[f'plain {what}']:,.0f} / {by_write[f'monotonic {what}']:,.0f}" for what in _WRITES]
        ratios = " / ".join(f"{by_write[f'monotonic {what}'] / by_write[f'plain {what}']:.2f}" for what in _WRITES)
        print(
            f"| engine writes of {args.conditional_items:,} points in batches of {size}, plain / monotonic "
            f"(stored seq read and compared first; deletes write tombstones), items/s: {', '.join(pairs)} | "
            f"ratios {ratios} |"
        )
    per_1000 = 1000 / max(claude.items_folded, 1)
    print(
        f"| compaction, extractive, {extractive.items_before} items (limit 10) | {extractive_s:.2f} s, "
        f"{extractive.items_before} -> {extractive.items_after} items |"
    )
    print(
        f"| compaction, Claude SDK vs fake API, {claude.items_before} items | {claude_s:.2f} s, "
        f"{claude.items_before} -> {claude.items_after} items |"
    )
    print(
        f"| per 1,000 items folded (fake API) | {claude.model_calls * per_1000:.1f} model calls, "
        f"{claude.input_tokens * per_1000:,.0f} input + {claude.output_tokens * per_1000:,.0f} output tokens |"
    )

    _print_doors(doors, args.door_facts)


if __name__ == "__main__":
    main()
