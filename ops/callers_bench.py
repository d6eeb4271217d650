"""Concurrent callers against the embedder alone, and where an item's CPU goes: ``ops/bench --mem0``'s
concurrent rows on memory-core alone, with the levers that move them side by side in one run.

  (a) the embedder alone on the round's chat turns, at the best of two layouts: one call per thread for its
      whole share (the embedder sorts it by length and pads each batch to its longest), and one text per
      call; each at 1 and 2 threads (and the worker's batch threads);
  (d) N threads each adding one turn per call until it is stored (``wait=True``), each turn a different user's
      of 200, as a chat app's request threads do.

Each deployment is a worker of its own, all started before the first round and measured in turn, the order
rotating each round. The levers compared:

  --embed-batch 8,16,32     MEMORY_EMBEDDER__BATCH_SIZE: a local model's batch is at most this many texts of
                            typical length, i.e. this x 32 padded tokens
  --batch-wait 0,50         MEMORY_BATCHING__MAX_WAIT_MS
  --write-cores 1,2,4       MEMORY_BATCHING__THREADS
  --embed-threads 1,2       MEMORY_EMBEDDER__THREADS: onnxruntime's threads for one model run

Printed: items/s and p50/p95 of (d) beside (a); the CPU an item cost each process (worker, client, Redis); the
model's own CPU an item, one text per call in one thread (the least an item can cost); and their quotient, the
highest share of (a) a saturated machine allows whatever its core count.

    ops/bench --callers 4,16 [--rounds 2] [--items 600] [--embed-batch 8,32] [--batch-wait 0,50]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from benchkit import cpu_per_item, cpu_processes, distinct_turns, embed_rate, percentile, settings_with
from stack import clear_prefix, isolated_env, redis_server, worker

from memory_core import MemoryClient, load_settings
from memory_core.core.models import MemorySet
from memory_core.engine.embedders import Embedder, open_embedder

USERS = 200
CEILING_SAMPLE = 300
"""Turns of each load (a) is measured on, before the load."""


@dataclass
class Deployment:
    label: str
    embed_batch: int
    wait_ms: float
    threads: int
    embed_threads: int
    pid: int = 0
    client: MemoryClient | None = None
    embedder: Embedder | None = None
    ceilings: list[float] = field(default_factory=list)  # (a), whole shares, per round
    loads: dict[int, list[tuple[float, list[float]]]] = field(default_factory=dict)  # callers -> (items/s, ms)s
    cpu: dict[int, list[dict[str, float]]] = field(default_factory=dict)  # callers -> ms CPU an item, by process


def single_text_rate(embedder: Embedder, texts: list[str], threads: int) -> float:
    """The embedder called with one text at a time from ``threads`` threads: no padding at all."""

    def embed_each(share: list[str]) -> None:
        for text in share:
            embedder.embed([text])

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(embed_each, [texts[i::threads] for i in range(threads)]))
    return len(texts) / (time.perf_counter() - started)


def callers(sets: list[MemorySet], texts: list[str], threads: int) -> tuple[float, list[float]]:
    """(d): ``threads`` threads, each adding the next turn (to the next user's set) when its add returns."""
    turns = iter(range(len(texts)))
    lock = threading.Lock()

    def feed(_: int) -> list[float]:
        times: list[float] = []
        while True:
            with lock:
                n = next(turns, None)
            if n is None:
                return times
            began = time.perf_counter()
            sets[n % len(sets)].add([texts[n]], wait=True)
            times.append((time.perf_counter() - began) * 1000)

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        times = [t for share in pool.map(feed, range(threads)) for t in share]
    return len(texts) / (time.perf_counter() - started), times


def _deployments(args: argparse.Namespace) -> list[Deployment]:
    base = load_settings()
    batches = [int(n) for n in args.embed_batch.split(",")] if args.embed_batch else [base.embedder.batch_size]
    waits = [float(ms) for ms in args.batch_wait.split(",")] if args.batch_wait else [base.batching.max_wait_ms]
    cores = (
        [int(n) for n in args.write_cores.split(",")]
        if args.write_cores
        else [base.batching.threads or os.cpu_count() or 1]
    )
    runs = [int(n) for n in args.embed_threads.split(",")] if args.embed_threads else [base.embedder.threads]
    return [
        Deployment(f"e{batch}-w{wait:g}-t{threads}-r{run}", batch, wait, threads, run)
        for batch, wait, threads, run in itertools.product(batches, waits, cores, runs)
    ]


ITEMS = 600
"""Turns a load, by default: about 15 s of adds at today's rate."""


def run(args: argparse.Namespace) -> None:
    """``args.rounds`` rounds of (a) and (d) at each caller count, on each deployment in turn; prints the tables."""
    counts = [int(n) for n in args.callers.split(",")]
    deployments = _deployments(args)
    base = load_settings()
    per_load = args.items if args.items_given else ITEMS
    args.items = per_load
    texts = distinct_turns(per_load * len(counts) * args.rounds)  # the turns ``ops/bench --mem0`` adds, in its order
    if not texts:
        raise SystemExit("no chat turns in ../shared/data: this section runs on real chat text")
    with contextlib.ExitStack() as stack:
        stack.enter_context(redis_server(base.redis.url))
        for number, deployment in enumerate(deployments):
            env = isolated_env(f"bc{number}")
            env["MEMORY_EMBEDDER__BATCH_SIZE"] = str(deployment.embed_batch)
            env["MEMORY_BATCHING__MAX_WAIT_MS"] = str(deployment.wait_ms)
            env["MEMORY_BATCHING__THREADS"] = str(deployment.threads)
            env["MEMORY_EMBEDDER__THREADS"] = str(deployment.embed_threads)
            settings = settings_with(env)
            clear_prefix(base.redis.url, settings.redis.key_prefix)
            deployment.pid = stack.enter_context(worker(env, name=f"bench-{deployment.label}")).pid
            deployment.client = stack.enter_context(MemoryClient(settings))
            deployment.embedder = open_embedder(settings.embedder)
            deployment.client.long_term("warm", "k").get_or_create_memory_set("warm").add(texts[:32])
            print(f"started {deployment.label}", flush=True)
        others = cpu_processes(base.redis.url)
        layouts: dict[str, list[float]] = {}
        model_ms: list[float] = []
        for n in range(args.rounds):
            for c, count in enumerate(counts):
                start = (n * len(counts) + c) * per_load
                load = texts[start : start + per_load]
                _ceilings(deployments, load[:CEILING_SAMPLE], layouts, model_ms)
                turn = (n * len(counts) + c) % len(deployments)
                for deployment in deployments[turn:] + deployments[:turn]:
                    client = deployment.client
                    assert client is not None
                    sets = [
                        client.long_term(f"user-{u:03d}", "chat").get_or_create_memory_set(
                            f"turns-{n}-{count}", capacity=1_000_000
                        )
                        for u in range(USERS)
                    ]
                    with cpu_per_item(deployment.cpu.setdefault(count, []), len(load), deployment.pid, others):
                        rate, times = callers(sets, load, count)
                    deployment.loads.setdefault(count, []).append((rate, times))
                    print(f"round {n + 1} {deployment.label}, {count} callers: {rate:.1f} items/s", flush=True)
    _print(deployments, counts, layouts, statistics.median(model_ms), args)


def _ceilings(
    deployments: list[Deployment], texts: list[str], layouts: dict[str, list[float]], model_ms: list[float]
) -> None:
    """(a) on ``texts``: each deployment's embedder in whole shares, and one text per call, at 1 and 2 threads."""
    cores = sorted({1, os.cpu_count() or 1} | {d.threads for d in deployments})
    first, first_runs = deployments[0].embedder, deployments[0].embed_threads
    assert first is not None
    began = time.process_time()
    for text in texts:
        first.embed([text])
    model_ms.append((time.process_time() - began) * 1000 / len(texts))
    for threads in cores:
        layouts.setdefault(f"one text a call, {threads} threads, model threads {first_runs}", []).append(
            single_text_rate(first, texts, threads)
        )
        for d in deployments:
            assert d.embedder is not None
            rate = embed_rate(d.embedder, texts, threads)
            label = f"whole shares, batch {d.embed_batch}, {threads} threads, model threads {d.embed_threads}"
            layouts.setdefault(label, []).append(rate)


def _print(
    deployments: list[Deployment],
    counts: list[int],
    layouts: dict[str, list[float]],
    model_ms: float,
    args: argparse.Namespace,
) -> None:
    print(f"\n{args.items} chat turns a load, {args.rounds} rounds; medians over the rounds\n")
    print("| (a) the embedder alone, layout | items/s |")
    print("|---|---|")
    best = {layout: statistics.median(rates) for layout, rates in layouts.items()}
    for layout, rate in sorted(best.items(), key=lambda kv: -kv[1]):
        print(f"| {layout} | {rate:.1f} |")
    ceiling = max(best.values())
    print(
        f"\nthe ceiling: {ceiling:.1f} items/s; the model's CPU an item, one text a call, one thread: {model_ms:.2f} ms"
    )
    print(
        "\n| deployment | callers | (d) items/s | share of the ceiling | p50 / p95 ms | CPU an item, ms: worker | client "
        "| Redis | all | model / all |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for d in deployments:
        for count in counts:
            rate = statistics.median(r for r, _ in d.loads[count])
            times = [t for _, ts in d.loads[count] for t in ts]
            cpu = {name: statistics.median(row[name] for row in d.cpu[count]) for name in d.cpu[count][0]}
            total = sum(cpu.values())
            print(
                f"| {d.label} | {count} | {rate:.1f} | **{rate / ceiling:.2f}** | {statistics.median(times):.0f} / "
                f"{percentile(times, 0.95):.0f} | {cpu['worker']:.2f} | {cpu['client']:.2f} | "
                f"{cpu.get('Redis', 0.0):.2f} | {total:.2f} | {model_ms / total:.2f} |"
            )
