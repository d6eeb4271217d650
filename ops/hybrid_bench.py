"""Hybrid search as the store grows: 100k against 1M items, on two vocabularies (``ops/bench --hybrid-scale``).

One embedded store per size, written straight into the engine (stand-in unit vectors, BM25 built as the
worker builds it), holding two big sets of 40% of the items each:

- ``template``: the bench's template corpus (a ~100-word vocabulary: each query word's posting list holds
  ~12% of the store, the worst case for lexical ranking);
- ``real``: texts of a real vocabulary, windows of 8 to 40 words cut from the shared datasets' chat turns
  (``../shared/data``), searched with the datasets' own questions;

and 20% over 99 namespaces x 10 sets (half of the tenants of each vocabulary), whose postings share the
big sets' posting lists; a tenant's set of each vocabulary is timed too (where a plan's fixed cost shows,
not its scans). Searches run in this process on the opened store, with query vectors of the real
embedder computed beforehand, so the table is the engine's query alone (what grows with the store); a
search through the queue adds a constant ~12 ms on this machine (the query's embedding, the queue).

``before`` is the query plan as it was (each lexical ranker evaluated twice: once for its candidates and
once inside the dense rescoring of the near-tie break), kept here to compare with; ``now`` is the store's.
The two alternate query by query on the same store: side by side in one run. Then a worker opens the store
and the same kind of questions (new ones: cache misses) go through the client and the queue: the search a
user sees; with ``--before DIR`` (an earlier ``memory_core``, exported with ``git archive``) a worker running
that code answers the same questions first.

    ops/bench --hybrid-scale 100000,1000000 [--searches 200] [--keep] [--before DIR]
"""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from benchkit import SHARED_DATA, corpus, percentile, timed
from scale import _CHUNK, _store
from stack import RUN_DIR, clear_prefix, isolated_env, worker

from memory_core import MemoryClient, load_settings
from memory_core.core.models import MemorySet, MemorySetItem, Scope
from memory_core.engine.embedders.minilm import DIMENSION, MiniLMEmbedder
from memory_core.engine.stores import ItemRecord
from memory_core.testing.fused_query import one_query_hybrid

BIG_SHARE = 0.4
VOCABULARIES = ("template", "real")
TARGETS = {
    **{f"{vocabulary}, big set": (vocabulary, Scope(vocabulary, "u", "notes")) for vocabulary in VOCABULARIES},
    # A tenant's set (20 items at 100k, 202 at 1M): where the plan's fixed cost shows, not its scans.
    **{f"{v}, a tenant's set": (v, Scope(f"tenant-{n}", "u", "set-0")) for n, v in enumerate(VOCABULARIES)},
}


def _real_words() -> list[str]:
    words: list[str] = []
    for items in sorted(SHARED_DATA.glob("*/items.jsonl")):
        for line in items.read_text().splitlines():
            words += json.loads(line)["text"].split()
    return words


def _texts(vocabulary: str, count: int, seed: int, real_words: list[str]) -> list[str]:
    if vocabulary == "template":
        return [t.replace("(note ", f"(note {seed}-") for t in corpus(count, seed=seed)]
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        length = rng.randint(8, 40)
        start = rng.randrange(len(real_words) - length)
        texts.append(" ".join(real_words[start : start + length]))
    return texts


def _layout(count: int) -> list[tuple[Scope, int, str]]:
    big = int(count * BIG_SHARE)
    per_set = max(1, (count - 2 * big) // 990)
    layout = [(Scope(v, "u", "notes"), big, v) for v in VOCABULARIES]
    for n in range(99):
        for s in range(10):
            layout.append((Scope(f"tenant-{n}", "u", f"set-{s}"), per_set, VOCABULARIES[n % 2]))
    return layout


def build(path: Path, count: int) -> float:
    """Writes the store of ``count`` items; seconds taken (index built)."""
    shutil.rmtree(path, ignore_errors=True)
    real_words = _real_words()
    store = _store(path)
    rng = np.random.default_rng(3)
    now = datetime.now(UTC)
    started = time.perf_counter()
    try:
        for number, (scope, size, vocabulary) in enumerate(_layout(count)):
            store.put_set(scope.namespace, scope.key, MemorySet(name=scope.set_name, capacity=1_000_000))
            for start in range(0, size, _CHUNK):
                n = min(_CHUNK, size - start)
                vectors = rng.standard_normal((n, DIMENSION), dtype=np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                texts = _texts(vocabulary, n, seed=number * 1_000_003 + start, real_words=real_words)
                records = [
                    ItemRecord(
                        item=MemorySetItem(
                            memory_set_name=scope.set_name,
                            id=str(start + i),
                            value=text,
                            created_time=now,
                            last_accessed_time=now,
                        ),
                        seq=start + i,
                        vector=vector.tolist(),
                    )
                    for i, (text, vector) in enumerate(zip(texts, vectors, strict=True))
                ]
                store.upsert(scope, records, context_window=2)
            if size > 10_000:
                print(f"  {scope.namespace}: {size:,} items written", flush=True)
        store.optimize()
        return time.perf_counter() - started
    finally:
        store.close()


def queries(vocabulary: str, count: int) -> list[str]:
    if vocabulary == "template":
        return [t.rsplit(" (", 1)[0] + f" {n}" for n, t in enumerate(corpus(count, seed=5))]
    questions = [
        json.loads(line)["question"]
        for path in sorted(SHARED_DATA.glob("*/queries.jsonl"))
        for line in path.read_text().splitlines()
    ]
    return random.Random(11).sample(questions, min(count, len(questions)))


def _timed_ms(call: Callable[[], Any]) -> float:
    began = time.perf_counter()
    call()
    return (time.perf_counter() - began) * 1000


def measure(path: Path, searches: int) -> dict[str, dict[str, list[float]]]:
    """Latencies per ``TARGETS`` entry: ``before`` / ``now`` hybrid and ``dense``, alternating query by query."""
    embedder = MiniLMEmbedder()
    store = _store(path)
    timings: dict[str, dict[str, list[float]]] = {}
    try:
        for target, (vocabulary, scope) in TARGETS.items():
            texts = queries(vocabulary, searches)
            vectors = embedder.embed(texts)
            for text, vector in list(zip(texts, vectors, strict=True))[:5]:  # warm-up
                store.search(scope, vector, 10, {}, text=text, mode="hybrid")
            runs: dict[str, list[float]] = {"before": [], "now": [], "dense": []}
            for n, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
                calls = [
                    ("before", functools.partial(one_query_hybrid, store, scope, vector, text, 10)),
                    ("now", functools.partial(store.search, scope, vector, 10, {}, text=text, mode="hybrid")),
                    ("dense", functools.partial(store.search, scope, vector, 10, {}, mode="dense")),
                ]
                for plan, call in calls[n % 3 :] + calls[: n % 3]:  # each goes first in turn: no order favours one
                    runs[plan].append(_timed_ms(call))
            timings[target] = runs
    finally:
        store.close()
    return timings


def through_queue(path: Path, size: int, searches: int, package: Path | None = None) -> dict[str, list[float]]:
    """Hybrid search in each big set through the client, the queue and a worker on the store (the worker runs
    the ``memory_core`` of ``package`` when given): other questions than the engine's table, so every search
    is a cache miss."""
    env = {**isolated_env("hybrid-scale"), "MEMORY_QDRANT__PATH": str(path)}
    os.environ.update(env)
    settings = load_settings()
    clear_prefix(settings.redis.url, settings.redis.key_prefix)
    timings: dict[str, list[float]] = {}
    with worker(env, name=f"hybrid-scale-worker-{size}", package=package), MemoryClient(settings) as client:
        for vocabulary in VOCABULARIES:
            notes = client.long_term(vocabulary, "u").get_memory_set("notes")
            notes.search("warm-up", limit=10)
            asked = [f"{q} ({n})" for n, q in enumerate(queries(vocabulary, searches))]
            timings[vocabulary] = timed(functools.partial(notes.search, limit=10), asked)
    return timings


def run(sizes: list[int], searches: int, keep: bool = False, before: Path | None = None) -> None:
    rows: dict[int, dict[str, dict[str, list[float]]]] = {}
    for size in sizes:
        path = RUN_DIR / f"hybrid-scale-{size}"
        if keep and path.is_dir():
            print(f"hybrid scale {size:,}: reusing the store at {path}", flush=True)
        else:
            print(f"hybrid scale {size:,}: writing the store", flush=True)
            print(f"hybrid scale {size:,}: written in {build(path, size):.0f} s", flush=True)
        rows[size] = measure(path, searches)
        if before is not None:
            for vocabulary, ms in through_queue(path, size, searches, package=before).items():
                rows[size][f"{vocabulary}, big set"]["through the queue, before"] = ms
        for vocabulary, ms in through_queue(path, size, searches).items():
            rows[size][f"{vocabulary}, big set"]["through the queue, now"] = ms
        if not keep:
            shutil.rmtree(path, ignore_errors=True)
        _print(rows, searches)


def _print(rows: dict[int, dict[str, dict[str, list[float]]]], searches: int) -> None:
    sizes = list(rows)
    print(
        f"\n### Hybrid search, {searches} queries, p50 / p95 ms: the engine's query in this process (big set: "
        f"{BIG_SHARE:.0%} of the store), and the whole search through the queue\n"
    )
    print("| set | query | " + " | ".join(f"{s:,} items" for s in sizes) + " | last / first p50 |")
    print("|---|---|" + "---|" * len(sizes) + "---|")
    for target in TARGETS:
        for plan in ("before", "now", "dense", "through the queue, before", "through the queue, now"):
            if plan not in rows[sizes[0]][target]:
                continue
            cells = [rows[s][target][plan] for s in sizes]
            pairs = [f"{statistics.median(c):.2f} / {percentile(c, 0.95):.2f}" for c in cells]
            ratio = statistics.median(cells[-1]) / statistics.median(cells[0])
            print(f"| {target} | {plan} | " + " | ".join(pairs) + f" | x{ratio:.2f} |")
    for size in sizes:
        for target in TARGETS:
            runs = rows[size][target]
            print(
                f"{size:,} {target}: now / before p50 = "
                f"{statistics.median(runs['now']) / statistics.median(runs['before']):.2f}"
            )
