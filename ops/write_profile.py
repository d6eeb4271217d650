"""Where a worker's CPU goes per add message (``ops/bench --profile-writes``).

A worker is started as the bench starts it; while it takes one add per item from 4 client threads (the
bench's (b)) and then adds of 100 (its (c)), every thread of the worker process is sampled (Python and
native frames; threads blocked on a lock, a socket or a sleep left out). Each sample is put in the first bucket its stack reaches from
the leaf up (the model, the tokenizer, the store, Redis, the broker, Celery's own handling, validation,
logging, metrics...), and the worker's CPU time over the run (from the kernel) is split by those shares
and divided by the items and by the messages it took (the client carries concurrent adds to one set
in one message, so one add per item from 4 threads arrives as fewer messages than items).

With ``--broker redis,rabbitmq`` each broker gets a worker of its own, profiled in turn on the same loads.

    ops/bench --profile-writes [--items 2000] [--broker redis,rabbitmq]
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

from stack import RUN_DIR, VENV_BIN, clear_prefix, isolated_env, worker

from memory_core import MemoryClient

_OUR_REDIS = "Redis round trips of ours (replies, locks, versions, caches)"
_BROKER = "broker transport (kombu, with its own Redis commands)"
# Leaf-first: the first rule whose marker is in a frame, walking from the sampled frame to the root, names
# the bucket. Markers are module paths and native library names as the sampler prints them.
BUCKETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("model (onnxruntime)", ("onnxruntime", "libonnxruntime")),
    ("tokenizer", ("tokenizers", "minilm.py")),
    ("store (engine write and read)", ("qdrant_edge", "stores/edge.py", "stores/base.py")),
    (_OUR_REDIS, ("redis/", "redis\\", "coordination.py", "cache/")),
    ("logging", ("logging/",)),
    ("metrics", ("prometheus_client",)),
    ("validation and models (pydantic)", ("pydantic", "validation.py", "messages.py", "models.py")),
    ("JSON", ("json/", "orjson")),
    ("thread hand-offs (task pool, micro-batching)", ("batching.py", "queue.py", "threading.py", "concurrent/futures")),
    (_BROKER, ("kombu/", "amqp/")),
    ("Celery's task handling", ("celery/", "billiard/")),
)
OTHER = "other (interpreter, our own code)"
WAITING = "waiting"
# A thread blocked in one of these is off the CPU; with native frames the sampler cannot always tell.
_BLOCKED = (
    "PyThread_acquire_lock_timed",
    "pthread_cond_wait",
    "pthread_cond_timedwait",
    "select_poll_poll",
    "select_epoll_poll",
    "epoll_wait",
    "poll (libc",
    "sock_recv",
    "sock_call",
    "pysleep",
    "time_sleep",
)


def bucket(stack: str) -> str:
    """The bucket of one sampled stack (frames root first, ``;``-separated); ``WAITING`` when it is blocked."""
    frames = stack.split(";")
    if any(marker in frame for frame in frames[-4:] for marker in _BLOCKED):
        return WAITING
    for frame in reversed(frames):
        for name, markers in BUCKETS:
            if any(marker in frame for marker in markers):
                # kombu keeps its visibility bookkeeping (and acks) in Redis: those commands are the broker's.
                if name == _OUR_REDIS and any("kombu/" in f for f in frames):
                    return _BROKER
                return name
    return OTHER


def _adds_received(log: Path) -> int:
    """Add messages the worker has taken so far (one log line each; clients coalesce concurrent adds)."""
    return log.read_text(errors="replace").count("Task memory.add[") // 2  # received, then succeeded


def _read(raw: Path) -> Counter[str]:
    shares: Counter[str] = Counter()
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit() and (name := bucket(stack)) != WAITING:
            shares[name] += int(count)
    return shares


def _ours(raw: Path) -> Counter[str]:
    """Samples outside the model and tokenizer, by the nearest frame in memory-core's own code."""
    found: Counter[str] = Counter()
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit() or bucket(stack) in (WAITING, BUCKETS[0][0], BUCKETS[1][0]):
            continue
        frames = stack.split(";")
        mine = [f for f in frames if "memory_core/" in f or "workers/" in f]
        found[mine[-1].split(" (")[0] if mine else "(not under our code: " + bucket(stack) + ")"] += int(count)
    return found


def run(items: int, batch: int, brokers: str = "redis") -> None:
    """Profiles a worker on each of ``brokers`` (comma-separated: redis, rabbitmq) in turn."""
    for broker in brokers.split(","):
        _profile(items, batch, broker)


def _profile(items: int, batch: int, broker: str) -> None:
    from benchkit import corpus, cpu_seconds, rabbitmq_vhost, settings_with, single_adds  # the bench's own loads

    env = isolated_env(f"profile-{broker[:6]}")
    results: list[tuple[str, int, float, Counter[str], Counter[str]]] = []
    log = RUN_DIR / f"profile-{broker}.log"  # where stack.worker logs it
    with contextlib.ExitStack() as stack:
        if broker == "rabbitmq":
            env["MEMORY_CELERY__BROKER_URL"] = stack.enter_context(rabbitmq_vhost("mc-bench-profile"))
        settings = settings_with(env)
        process = stack.enter_context(worker(env, name=f"profile-{broker}"))
        client = stack.enter_context(MemoryClient(settings))
        texts = corpus(items, seed=13)
        clear_prefix(settings.redis.url, settings.redis.key_prefix)
        ltm = client.long_term("bench", "k")
        warm = ltm.get_or_create_memory_set("warm", capacity=1_000_000)
        warm.add(corpus(64, seed=99))
        for n, label in enumerate(("one add per item, 4 client threads", f"adds of {batch}")):
            raw = RUN_DIR / f"write-profile-{n}.txt"
            sampler = subprocess.Popen(
                [str(VENV_BIN / "py-spy"), "record", "--pid", str(process.pid), "--format", "raw", "--rate", "100"]
                + ["--native", "--output", str(raw)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1.0)  # the sampler attaches
            cpu, taken = cpu_seconds(process.pid), _adds_received(log)
            if n == 0:
                single_adds(client, texts)
            else:
                notes = ltm.get_or_create_memory_set("batched", capacity=1_000_000)
                receipts = [ltm.submit(notes, texts[i : i + batch]) for i in range(0, len(texts), batch)]
                for receipt in receipts:
                    receipt.wait(timeout=600)
            cpu, messages = cpu_seconds(process.pid) - cpu, _adds_received(log) - taken
            sampler.send_signal(signal.SIGINT)
            sampler.wait(timeout=60)
            results.append((label, messages, cpu, _read(raw), _ours(raw)))
            texts = corpus(items, seed=17)  # new texts: no cached embeddings
    for label, messages, cpu, shares, ours in results:
        total = sum(shares.values()) or 1
        print(f"\nworker CPU per message on {broker}, {label}: {items} items in {messages} messages")
        print(f"{cpu:.1f} s of CPU, {cpu / messages * 1000:.2f} ms per message, {cpu / items * 1000:.2f} ms per item\n")
        print("| where | share of samples | ms CPU per message | ms CPU per item |")
        print("|---|---|---|---|")
        for name, count in shares.most_common():
            share = count / total
            print(f"| {name} | {share:.1%} | {cpu / messages * 1000 * share:.2f} | {cpu / items * 1000 * share:.2f} |")
        print(f"\nwhat is not the model, by the nearest function of ours on the stack ({broker}, {label}):\n")
        print("| function | ms CPU per message |")
        print("|---|---|")
        for name, count in ours.most_common(12):
            print(f"| {name} | {cpu / messages * 1000 * count / total:.2f} |")
