"""Cost as work grows: one embedded node at 10k, 100k and 1M items (``ops/bench --scale``).

For each size, items are written straight into one embedded store (stand-in unit vectors, real texts,
BM25 built as the worker builds it) across many namespaces and sets: half in one big set, the rest in
99 namespaces x 10 sets, plus a 100-item set for filtered search, a set over its eviction bound and
1% of the items expired. Then, for that store:

- load rate and disk size;
- time to open the store again (in this process), and until a worker started on it is ready;
- maintenance passes run in this process as beat runs them (TTL sweep, eviction, index optimize), each
  with a writer adding one item every 10 ms beside it: the longest write stall during the pass;
- through the queue (client -> Redis -> worker -> reply; new queries, so cache misses; the real
  embedder): hybrid and dense search p50/p95 in the big set, search in the small set, worker RSS after
  each of three rounds, and how long an add that fills a set to capacity takes to have it compacted.

    ops/bench --scale 10000,100000,1000000
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from benchkit import corpus, percentile, rss_mb, timed
from stack import RUN_DIR, clear_prefix, isolated_env, worker

from memory_core import EvictionPolicy, MemoryClient, load_settings
from memory_core.core.coordination import Coordinator
from memory_core.core.dispatch import open_redis
from memory_core.core.keys import Keys
from memory_core.core.models import MemorySet, MemorySetItem, Scope
from memory_core.core.settings import MaintenanceSettings, QdrantSettings
from memory_core.engine.embedders.minilm import DIMENSION, MODEL_NAME
from memory_core.engine.maintenance import Maintenance
from memory_core.engine.stores import ItemRecord, collection_name
from memory_core.engine.stores.edge import EdgeVectorStore

_CHUNK = 2_000
_SMALL = 100
_CAPACITY_SET = 200
_EVICT_EXCESS = 2_000


def _store(path: Path) -> EdgeVectorStore:
    return EdgeVectorStore(path, collection=collection_name(QdrantSettings(path=path), MODEL_NAME), dimension=DIMENSION)


def _disk_mb(path: Path) -> float:
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file()) / 2**20


def pair(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} / {percentile(values, 0.95):.1f} ms"


def _layout(count: int) -> list[tuple[Scope, int, MemorySet]]:
    """Where the items go: half in one big set, the rest over 99 namespaces x 10 sets, and the side sets."""
    big = count // 2
    rest = count - big - _SMALL - _CAPACITY_SET - _EVICT_EXCESS
    per_set = max(1, rest // 990)
    layout = [(Scope("big", "u", "notes"), big, MemorySet(name="notes", capacity=1_000_000))]
    for n in range(99):
        for s in range(10):
            layout.append(
                (Scope(f"tenant-{n}", "u", f"set-{s}"), per_set, MemorySet(name=f"set-{s}", capacity=1_000_000))
            )
    layout.append((Scope("small", "u", "notes"), _SMALL, MemorySet(name="notes", capacity=1_000)))
    # Filled to one below capacity: the measured add fills it and triggers its compaction.
    layout.append((Scope("full", "u", "notes"), _CAPACITY_SET - 1, MemorySet(name="notes", capacity=_CAPACITY_SET)))
    evicting = MemorySet(name="notes", capacity=1_000_000, eviction=EvictionPolicy(max_items=1_000))
    layout.append((Scope("evicting", "u", "notes"), 1_000 + _EVICT_EXCESS, evicting))
    return layout


def _load(path: Path, count: int) -> tuple[float, int]:
    """Writes ``count`` items as ``_layout`` says (1% already expired); seconds taken (with the index built)."""
    shutil.rmtree(path, ignore_errors=True)
    store = _store(path)
    rng = np.random.default_rng(3)
    words = [w for line in _texts(2_000) for w in line.split()]
    now = datetime.now(UTC)
    past = now - timedelta(minutes=1)
    written = 0
    started = time.perf_counter()
    try:
        for scope, size, definition in _layout(count):
            store.put_set(scope.namespace, scope.key, definition)
            for start in range(0, size, _CHUNK):
                n = min(_CHUNK, size - start)
                vectors = rng.standard_normal((n, DIMENSION), dtype=np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                records = []
                for i, vector in enumerate(vectors):
                    number = written + i
                    text = " ".join(random.Random(number).sample(words, 12)) + f" (note {number})"
                    item = MemorySetItem(
                        memory_set_name=scope.set_name,
                        id=str(start + i),
                        value=text,
                        created_time=now,
                        last_accessed_time=now,
                        expires_at=past if number % 100 == 99 and scope.namespace.startswith("tenant") else None,
                    )
                    records.append(ItemRecord(item=item, seq=start + i, vector=vector.tolist()))
                store.upsert(scope, records, context_window=2)
                written += n
        store.optimize()
        return time.perf_counter() - started, written
    finally:
        store.close()


def _texts(count: int) -> list[str]:
    return corpus(count, seed=5)  # the bench's realistic texts


def _stalls(store: EdgeVectorStore, run: Any) -> tuple[float, float, Any]:
    """Runs ``run()`` while a writer adds one item every 10 ms; (seconds it took, longest write in s, result)."""
    scope = Scope("writer", "u", "notes")
    store.put_set("writer", "u", MemorySet(name="notes", capacity=1_000_000))
    stop = threading.Event()
    longest = [0.0]
    rng = np.random.default_rng(9)

    def write() -> None:
        n = 0
        while not stop.is_set():
            vector = rng.standard_normal(DIMENSION).astype(np.float32)
            now = datetime.now(UTC)
            item = MemorySetItem(
                memory_set_name="notes",
                id=f"w{time.time_ns()}",
                value=f"write {n}",
                created_time=now,
                last_accessed_time=now,
            )
            began = time.perf_counter()
            unit = (vector / np.linalg.norm(vector)).tolist()
            store.upsert(scope, [ItemRecord(item=item, seq=time.time_ns(), vector=unit)])
            longest[0] = max(longest[0], time.perf_counter() - began)
            n += 1
            time.sleep(0.01)

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(0.1)
    try:
        began = time.perf_counter()
        result = run()
        took = time.perf_counter() - began
        time.sleep(0.1)
    finally:
        stop.set()
        writer.join()
    return took, longest[0], result


def _maintenance(path: Path, settings: Any) -> dict[str, tuple[float, float, int]]:
    """TTL sweep, eviction and optimize passes on the loaded store, each beside a writer."""
    store = _store(path)
    client = open_redis(settings)
    keys = Keys(settings.redis.key_prefix)
    try:
        maintenance = Maintenance(
            store=store, coordinator=Coordinator(client, keys), keys=keys, settings=MaintenanceSettings()
        )
        passes: dict[str, tuple[float, float, int]] = {}
        for name, run in (("TTL sweep", maintenance.ttl_sweep), ("eviction", maintenance.evict)):
            clear_prefix(settings.redis.url, settings.redis.key_prefix)  # the sweep locks of an earlier pass
            took, longest, report = _stalls(store, run)
            passes[name] = (took, longest, report.items)
        took, longest, built = _stalls(store, store.optimize)
        passes["index optimize (after those writes)"] = (took, longest, int(built))
        return passes
    finally:
        store.close()
        client.close()


def _reopen_s(path: Path) -> float:
    began = time.perf_counter()
    store = _store(path)
    took = time.perf_counter() - began
    store.close()
    return took


def _queries(count: int) -> list[str]:
    return [t.rsplit(" (", 1)[0] + f" {n}" for n, t in enumerate(_texts(count))]


def _through_queue(path: Path, env: dict[str, str], size: int, searches: int) -> dict[str, Any]:
    run_env = {**env, "MEMORY_QDRANT__PATH": str(path)}
    os.environ.update(run_env)
    settings = load_settings()
    clear_prefix(settings.redis.url, settings.redis.key_prefix)
    queries = _queries(searches * 5)
    began = time.perf_counter()
    with worker(run_env, name=f"scale-worker-{size}") as process, MemoryClient(settings) as client:
        ready_s = time.perf_counter() - began
        big = client.long_term("big", "u").get_memory_set("notes")
        small = client.long_term("small", "u").get_memory_set("notes")
        big.search("warm-up", limit=10)
        rss = [rss_mb(process.pid)]
        rounds = []
        for r in range(3):
            rounds.append(timed(lambda q: big.search(q, limit=10), queries[r * searches : (r + 1) * searches]))
            rss.append(rss_mb(process.pid))
        dense = timed(lambda q: big.search(q, limit=10, mode="dense"), queries[3 * searches : 4 * searches])
        filtered = timed(lambda q: small.search(q, limit=10), queries[4 * searches :])
        full = client.long_term("full", "u").get_memory_set("notes")
        began = time.perf_counter()
        full.add(["the item that fills the set"])
        added_s = time.perf_counter() - began
        deadline = time.monotonic() + 300
        while full.size() >= _CAPACITY_SET and time.monotonic() < deadline:
            time.sleep(0.05)
        compacted_s = time.perf_counter() - began if full.size() < _CAPACITY_SET else float("nan")
    return {
        "ready_s": ready_s,
        "rss": rss,
        "hybrid": [q for r in rounds for q in r],
        "rounds": rounds,
        "dense": dense,
        "filtered": filtered,
        "add_s": added_s,
        "compacted_s": compacted_s,
    }


def run(sizes: list[int], searches: int) -> None:
    env = isolated_env("scale")
    env["MEMORY_ANTHROPIC__API_KEY"] = ""  # the offline summarizer: the trigger's latency, not a model's
    rows: dict[int, dict[str, Any]] = {}
    for size in sizes:
        path = RUN_DIR / f"scale-{size}"
        print(f"scale {size:,}: loading", flush=True)
        load_s, written = _load(path, size)
        row: dict[str, Any] = {"load_s": load_s, "written": written, "disk_mb": _disk_mb(path)}
        row["reopen_s"] = _reopen_s(path)
        print(f"scale {size:,}: maintenance passes", flush=True)
        settings = load_settings()
        row["passes"] = _maintenance(path, settings)
        print(f"scale {size:,}: through the queue", flush=True)
        row.update(_through_queue(path, env, size, searches))
        rows[size] = row
        shutil.rmtree(path, ignore_errors=True)
        _print(rows, searches)


def _print(rows: dict[int, dict[str, Any]], searches: int) -> None:
    sizes = list(rows)
    print(f"\nmemory-core scale: one embedded node ({os.cpu_count()} cores), {searches} searches per round\n")
    print("| measure | " + " | ".join(f"{s:,} items" for s in sizes) + " |")
    print("|---|" + "---|" * len(sizes))

    def line(name: str, cell: Any) -> None:
        print(f"| {name} | " + " | ".join(cell(rows[s]) for s in sizes) + " |")

    line("load straight into the engine (index built), items/s", lambda r: f"{r['written'] / r['load_s']:,.0f}")
    line("disk", lambda r: f"{r['disk_mb']:,.0f} MB")
    line("open the store again", lambda r: f"{r['reopen_s']:.2f} s")
    line("start a worker on it until ready (model load included)", lambda r: f"{r['ready_s']:.1f} s")
    line("hybrid search in the big set (half the items), p50 / p95", lambda r: pair(r["hybrid"]))
    line("dense search in the big set, p50 / p95", lambda r: pair(r["dense"]))
    line(f"search in a {_SMALL}-item set of the same store, p50 / p95", lambda r: pair(r["filtered"]))
    line("worker RSS: warm / after rounds 1, 2, 3", lambda r: " / ".join(f"{m:,.0f}" for m in r["rss"]) + " MB")
    for name in rows[sizes[0]]["passes"]:
        line(
            f"{name}: pass time / longest write during it / items",
            lambda r, n=name: f"{r['passes'][n][0]:.2f} s / {r['passes'][n][1] * 1000:.0f} ms / {r['passes'][n][2]:,}",
        )
    line(
        f"add that fills a {_CAPACITY_SET}-item set: reply / compacted after",
        lambda r: f"{r['add_s'] * 1000:.0f} ms / {r['compacted_s']:.2f} s",
    )
    if len(sizes) > 1:
        first, last = sizes[-2], sizes[-1]
        ratio = statistics.median(rows[last]["hybrid"]) / statistics.median(rows[first]["hybrid"])
        print(f"\nhybrid search p50 at {last:,} / at {first:,}: {ratio:.2f}")
