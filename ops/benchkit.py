"""What the benchmarks share: the texts they write (a template corpus, the shared datasets' chat turns),
timing and percentiles, the write loads (b) and (c) and the embedder's ceiling (a), RSS, and a big store
written straight into the engine.

``ops/bench.py`` (the runner) and every section (``scale``, ``mem0_bench``, ``reindex_bench`` ...) import
from here, and none of them from another.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import redis
from stack import ROOT

from memory_core import MemoryClient, WriteReceipt, load_settings
from memory_core.core.models import MemorySet, MemorySetItem, Scope
from memory_core.core.settings import QdrantSettings, Settings
from memory_core.engine.embedders import Embedder, EmbedderFingerprint
from memory_core.engine.stores import ItemRecord, collection_name, meta_collection_name
from memory_core.engine.stores.edge import EdgeVectorStore

SUBJECTS = ["Alice", "Bob", "the support agent", "our CFO", "Maya", "the on-call engineer", "Chen", "the customer"]

VERBS = ["prefers", "asked about", "complained about", "ordered", "cancelled", "recommended", "forgot", "scheduled"]

OBJECTS = [
    "green tea",
    "a refund for order 4411",
    "the Lyon office move",
    "peanut-free catering",
    "a Kyoto trip",
    "the quarterly report",
    "a ThinkPad X1",
    "the half marathon",
    "Postgres failover drills",
    "a dentist visit",
]

TAILS = [
    "last Tuesday",
    "before the board meeting",
    "during the outage",
    "in the chat yesterday",
    "by e-mail",
    "for next spring",
    "after the demo",
    "while travelling",
    "on the phone",
    "as a recurring reminder",
]


def corpus(count: int, seed: int = 7) -> list[str]:
    """Varied, realistic-length memory texts (deterministic)."""
    rng = random.Random(seed)
    return [
        f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)} (note {i})"
        for i in range(count)
    ]


RABBITMQ = "amqp://guest:guest@127.0.0.1:5672"
"""The local RabbitMQ (guest/guest) the broker comparisons use, a vhost each."""

SHARED_DATA = ROOT.parent / "shared" / "data"
"""Where the chat datasets are (``ops/eval``'s default data beside the project): (a) is measured on their turns."""


def chat_turns(count: int) -> list[str]:
    """``count`` real chat turns, an equal share of each dataset in ``SHARED_DATA`` (a stride through its
    ``items.jsonl``: short and long turns alike); none when no dataset is on this machine."""
    files = sorted(SHARED_DATA.glob("*/items.jsonl"))
    texts: list[str] = []
    for items in files:
        lines = items.read_text().splitlines()
        share = max(1, count // len(files))
        texts += [json.loads(line)["text"] for line in lines[:: max(1, len(lines) // share)]][:share]
    return texts


def distinct_turns(count: int) -> list[str]:
    """``count`` distinct chat turns: every distinct turn of the shared datasets, mixed in a fixed shuffle, cycled;
    the k-th repeat of a turn starts ``(k)`` (at the start, so that its vector differs too)."""
    turns: dict[str, None] = {}
    for items in sorted(SHARED_DATA.glob("*/items.jsonl")):
        for line in items.read_text().splitlines():
            text = json.loads(line)["text"].strip()
            if text:
                turns[text] = None
    mixed = list(turns)
    random.Random(20_000).shuffle(mixed)
    if not mixed:
        return []
    texts = []
    for n in range(count):
        repeat, index = divmod(n, len(mixed))
        texts.append(mixed[index] if repeat == 0 else f"({repeat}) {mixed[index]}")
    assert len(set(texts)) == len(texts), "every turn of the workload must be distinct"
    return texts


def pair(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ms / {percentile(values, 0.95):.2f} ms"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def embed_rate(embedder: Embedder, texts: list[str], threads: int) -> float:
    # One call per thread for its whole share: the embedder orders a call's texts by length and pads each
    # batch to its longest, so the largest calls waste the least (the embedder's best layout).
    # Dealt round-robin, so each thread gets its share of short and long texts alike: chat turns come dataset by
    # dataset (short ones, then long ones), and contiguous shares left one thread with most of the work.
    chunks = [texts[i::threads] for i in range(threads)]
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(embedder.embed, chunks))
    return len(texts) / (time.perf_counter() - started)


def timed(call: Callable[[str], object], queries: list[str]) -> list[float]:
    latencies = []
    for query in queries:
        started = time.perf_counter()
        call(query)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def single_adds(client: MemoryClient, texts: list[str], clients: int = 4, name: str = "singles") -> float:
    """(b): one add() per item from ``clients`` threads, wait=False, timed until every item is durable."""
    ltm = client.long_term("bench", "k")
    singles = ltm.get_or_create_memory_set(name, capacity=1_000_000)
    receipts: list[WriteReceipt] = []
    lock = threading.Lock()

    def send(part: list[str]) -> None:
        mine = [ltm.submit(singles, [text]) for text in part]
        with lock:
            receipts.extend(mine)

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(send, [texts[i::clients] for i in range(clients)]))
    for receipt in receipts:
        receipt.wait(timeout=600)
    rate = len(texts) / (time.perf_counter() - started)
    assert singles.size() == len(texts), "every item must be stored"
    return rate


def batched_adds(client: MemoryClient, texts: list[str], batch: int) -> float:
    """(c): add() calls of ``batch`` items, all sent, then timed until every item is durable."""
    ltm = client.long_term("bench", "k")
    notes = ltm.get_or_create_memory_set("notes", capacity=1_000_000)
    started = time.perf_counter()
    receipts = [ltm.submit(notes, texts[i : i + batch]) for i in range(0, len(texts), batch)]
    for receipt in receipts:
        receipt.wait(timeout=600)
    rate = len(texts) / (time.perf_counter() - started)
    assert notes.size() == len(texts), "every item must be stored"
    return rate


def embed_rates(embedder: Embedder, texts: list[str], settings: Settings) -> dict[int, float]:
    """(a): the embedder alone at its best layout, items/s by thread count; the worker embeds in several
    threads at once, so the ceiling is the best of them, each measured twice."""
    embedder.embed(texts[:64])  # warm-up
    rates: dict[int, float] = {}
    for threads in sorted({1, os.cpu_count() or 1, settings.celery.concurrency}):
        for _ in range(2):
            rates[threads] = max(rates.get(threads, 0.0), embed_rate(embedder, texts, threads))
    return rates


def clear_embeddings(url: str, prefix: str) -> None:
    """Drops cached embeddings, so the next measure on the same texts embeds them again."""
    client = redis.Redis.from_url(url)
    try:
        for key in client.scan_iter(f"{prefix}:*:embedding:*", count=1000):
            client.delete(key)
    finally:
        client.close()


@contextlib.contextmanager
def rabbitmq_vhost(name: str) -> Iterator[str]:
    """A vhost of this run's own on the local RabbitMQ (``rabbitmqctl``), deleted with its queues afterwards."""

    def ctl(*args: str) -> None:
        subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=60)

    with contextlib.suppress(subprocess.CalledProcessError):
        ctl("delete_vhost", name)  # a killed run's leftovers
    ctl("add_vhost", name)
    try:
        ctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
        yield f"{RABBITMQ}/{name}"
    finally:
        ctl("delete_vhost", name)


def settings_with(env: dict[str, str]) -> Settings:
    """``load_settings()`` as a worker started with ``env`` sees it, leaving this process's environment as it was."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        return load_settings()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user and system) process ``pid`` has used so far, from the kernel."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_processes(redis_url: str) -> dict[str, int]:
    """The broker-side processes whose CPU an add costs too: redis-server and, when it runs, RabbitMQ's node."""
    found = {"Redis": int(redis.Redis.from_url(redis_url).info("server")["process_id"])}
    beam = subprocess.run(["pgrep", "-f", "beam.smp.*rabbit"], capture_output=True, text=True, check=False)
    if beam.stdout.split():
        found["RabbitMQ"] = int(beam.stdout.split()[0])
    return found


@contextlib.contextmanager
def cpu_per_item(into: list[dict[str, float]], items: int, worker_pid: int, others: dict[str, int]) -> Iterator[None]:
    """Appends to ``into`` the ms of CPU per item the block cost each process: the worker, this process (the
    client's threads), Redis and RabbitMQ (``cpu_processes``)."""
    pids = {"worker": worker_pid, **others}
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    client = time.process_time()
    yield
    spent = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    spent["client"] = time.process_time() - client
    into.append({name: seconds * 1000 / items for name, seconds in spent.items()})


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def big_store(path: Path, count: int, model_name: str, fingerprint: EmbedderFingerprint) -> float:
    """Writes a ``count``-item set straight into an embedded store (random vectors, real texts); seconds taken.

    The store is the one the worker's embedder (``model_name``, ``fingerprint``) opens, so it searches it."""
    shutil.rmtree(path, ignore_errors=True)
    settings = QdrantSettings(path=path)
    dimension = fingerprint.dimension
    store = EdgeVectorStore(
        path,
        collection=collection_name(settings, model_name),
        dimension=dimension,
        meta=meta_collection_name(settings),
        fingerprint=fingerprint,
    )
    started = time.perf_counter()
    try:
        store.put_set("bench", "big", MemorySet(name="notes", capacity=1_000_000))
        rng = np.random.default_rng(3)
        texts = corpus(count, seed=3)
        now = datetime.now(UTC)
        scope = Scope("bench", "big", "notes")
        for start in range(0, count, 2_000):
            vectors = rng.standard_normal((min(2_000, count - start), dimension), dtype=np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            records = [
                ItemRecord(
                    item=MemorySetItem(
                        memory_set_name="notes",
                        id=str(start + i),
                        value=texts[start + i],
                        created_time=now,
                        last_accessed_time=now,
                    ),
                    seq=start + i,
                    vector=vector,
                )
                for i, vector in enumerate(vectors)
            ]
            store.upsert(scope, records, context_window=2)
        store.optimize()  # what the memory.optimize maintenance task does
        return time.perf_counter() - started
    finally:
        store.close()
