"""Load test: concurrent clients mixing adds, searches, gets and deletes across many namespaces.

Runs for a fixed time against a real worker (and a local Redis if none answers), then
checks consistency: every acknowledged write is present exactly once, every
acknowledged delete is gone. Exits 1 if anything was lost or duplicated.

    ops/load [--clients 8] [--namespaces 20] [--seconds 30]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from stack import clear_prefix, isolated_env, redis_server, worker

from memory_core import MemoryClient, MemoryCoreError, load_settings

WORDS = [
    "tea",
    "flight",
    "report",
    "invoice",
    "allergy",
    "meeting",
    "office",
    "refund",
    "laptop",
    "marathon",
    "kyoto",
    "lyon",
    "budget",
]


@dataclass
class Ledger:
    """What one client saw acknowledged, and how long each operation took."""

    written: dict[tuple[str, str], str] = field(default_factory=dict)
    deleted: set[tuple[str, str]] = field(default_factory=set)
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def run_client(client: MemoryClient, namespaces: list[str], deadline: float, seed: int, ledger: Ledger) -> None:
    rng = random.Random(seed)
    counter = 0
    live: list[tuple[str, str]] = []
    while time.monotonic() < deadline:
        namespace = rng.choice(namespaces)
        ltm = client.long_term(namespace, "user")
        op = rng.choices(["add", "search", "get", "delete"], weights=[50, 25, 15, 10])[0]
        started = time.perf_counter()
        try:
            if op == "add":
                count = rng.randint(1, 5)
                ids = [f"s{seed}-{counter + i}" for i in range(count)]
                counter += count
                values = [f"{' '.join(rng.sample(WORDS, 4))} #{i}" for i in ids]
                ltm.add("notes", values, ids=ids)
                ledger.written.update(((namespace, i), v) for i, v in zip(ids, values, strict=True))
                live.extend((namespace, i) for i in ids)
            elif op == "search":
                ltm.search("notes", " ".join(rng.sample(WORDS, 2)), limit=5)
            elif op == "get" and live:
                ns, item_id = rng.choice(live)
                client.long_term(ns, "user").get("notes", [item_id])
            elif op == "delete" and live:
                ns, item_id = live.pop(rng.randrange(len(live)))
                client.long_term(ns, "user").delete("notes", [item_id])
                ledger.deleted.add((ns, item_id))
            else:
                continue
        except MemoryCoreError:
            ledger.errors[op] += 1
            continue
        ledger.latencies[op].append((time.perf_counter() - started) * 1000)


def check(client: MemoryClient, namespaces: list[str], ledgers: list[Ledger]) -> tuple[int, int, int, int]:
    """Returns (acknowledged writes checked, lost, duplicated, deletes that came back)."""
    written = {k: v for ledger in ledgers for k, v in ledger.written.items()}
    deleted = {k for ledger in ledgers for k in ledger.deleted}
    lost = duplicated = resurrected = 0
    for namespace in namespaces:
        items = client.long_term(namespace, "user").get("notes")
        ids = [i.id for i in items]
        duplicated += len(ids) - len(set(ids))
        present = {(namespace, i.id): i.value for i in items}
        for key, value in written.items():
            if key[0] == namespace and key not in deleted and present.get(key) != value:
                lost += 1
        resurrected += sum(1 for key in deleted if key[0] == namespace and key in present)
    return len(written), lost, duplicated, resurrected


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()

    env = isolated_env("load")
    settings = load_settings()
    namespaces = [f"tenant-{n:03d}" for n in range(args.namespaces)]
    with redis_server(settings.redis.url), worker(env, name="load-worker"), MemoryClient(settings) as client:
        clear_prefix(settings.redis.url, settings.redis.key_prefix)
        for namespace in namespaces:
            client.long_term(namespace, "user").get_or_create_memory_set("notes", capacity=1_000_000, dedup="none")
        ledgers = [Ledger() for _ in range(args.clients)]
        deadline = time.monotonic() + args.seconds
        threads = [
            threading.Thread(target=run_client, args=(client, namespaces, deadline, n, ledgers[n]))
            for n in range(args.clients)
        ]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        checked, lost, duplicated, resurrected = check(client, namespaces, ledgers)

    print(f"\nmemory-core load: {args.clients} clients, {args.namespaces} namespaces, {elapsed:.1f} s\n")
    print("| operation | count | ops/s | errors | p50 | p99 |")
    print("|---|---|---|---|---|---|")
    for op in ("add", "search", "get", "delete"):
        values = sorted(v for ledger in ledgers for v in ledger.latencies[op])
        errors = sum(ledger.errors[op] for ledger in ledgers)
        if not values:
            continue
        p99 = values[min(len(values) - 1, int(0.99 * len(values)))]
        print(f"| {op} | {len(values)} | {len(values) / elapsed:.1f} | {errors} | "
              f"{statistics.median(values):.1f} ms | {p99:.1f} ms |")  # fmt: skip
    print(f"\nconsistency: {checked} acknowledged writes checked, lost {lost}, duplicated {duplicated}, "
          f"acknowledged deletes that came back {resurrected}")  # fmt: skip
    return 0 if lost == duplicated == resurrected == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
