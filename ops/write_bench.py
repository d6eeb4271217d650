"""The write path against the embedder alone: (a), (b) and (c) on several deployments, side by side in one run.

  (a) the embedder alone at its best layout (one call per thread for its whole share), on the round's texts;
  (b) one ``add`` per item from 4 client threads (``wait=False``), timed until every item is durable;
  (c) ``add`` calls of ``--batch`` items, all sent at once, timed until every item is durable.

Each deployment is a worker of its own (its own data directory, Redis key prefix and, on RabbitMQ, vhost), all
started before the first round and measured in turn, the order rotating each round, so the machine's noise
falls on each alike. The levers compared:

  --broker redis,rabbitmq   the broker the adds travel on (Redis emulates acks with a MULTI pipeline a
                            message; AMQP acks are native); replies and caches stay on Redis
  --batch-items 64,1024     MEMORY_BATCHING__MAX_ITEMS: how many items of the messages a worker holds at once
                            its batch threads embed as one length-sorted call
  --batch-wait 0,50         MEMORY_BATCHING__MAX_WAIT_MS: how long a batch thread waits for more adds while
                            another one is busy
  --write-cores 1,2,4       MEMORY_BATCHING__THREADS: threads embedding at once in the worker (a core each); (a)
                            is then measured at the same thread count, so each ratio is per core count

    ops/bench --writes 3 --broker redis,rabbitmq [--batch-items 64,1024] [--items 2000] [--batch 100]
    ops/bench --writes 2 --write-cores 1,2,4
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import statistics
import time
from dataclasses import dataclass, field

from benchkit import (
    batched_adds,
    clear_embeddings,
    corpus,
    cpu_per_item,
    cpu_processes,
    embed_rate,
    rabbitmq_vhost,
    settings_with,
    single_adds,
)
from stack import clear_prefix, isolated_env, redis_server, worker

from memory_core import MemoryClient, load_settings
from memory_core.core.settings import Settings
from memory_core.engine.embedders import open_embedder


@dataclass
class Deployment:
    """One worker and its client's settings; ``threads`` is how many threads embed at once in it."""

    label: str
    broker: str
    batch_items: int
    threads: int
    wait_ms: float
    env: dict[str, str] = field(default_factory=dict)
    settings: Settings | None = None
    pid: int = 0
    rows: list[tuple[float, float, float]] = field(default_factory=list)  # (a), (b), (c) per round
    cpu: dict[str, list[dict[str, float]]] = field(default_factory=dict)  # (b) and (c): ms CPU an item, by process


def _deployments(args: argparse.Namespace) -> list[Deployment]:
    brokers = args.broker.split(",")
    unknown = set(brokers) - {"redis", "rabbitmq"}
    if unknown:
        raise SystemExit(f"--broker {args.broker}: unknown broker {sorted(unknown)}; use redis, rabbitmq or both")
    default_items = load_settings().batching.max_items
    sizes = [int(size) for size in args.batch_items.split(",")] if args.batch_items else [default_items]
    cores = [int(n) for n in args.write_cores.split(",")] if args.write_cores else [os.cpu_count() or 1]
    waits = (
        [float(ms) for ms in args.batch_wait.split(",")] if args.batch_wait else [load_settings().batching.max_wait_ms]
    )
    return [
        Deployment(f"{broker}-{items}-{threads}-{wait:g}", broker, items, threads, wait)
        for broker, items, threads, wait in itertools.product(brokers, sizes, cores, waits)
    ]


def run(args: argparse.Namespace) -> None:
    """``args.writes`` rounds of (a), (b) and (c) on each deployment; prints a row per round and deployment."""
    deployments = _deployments(args)
    base = load_settings()
    embedder = open_embedder(base.embedder)
    print(f"embedder: {embedder.fingerprint.describe()}", flush=True)
    with contextlib.ExitStack() as stack:
        stack.enter_context(redis_server(base.redis.url))
        clients: dict[str, MemoryClient] = {}
        for number, deployment in enumerate(deployments):
            env = isolated_env(f"bw{number}")  # a key prefix is at most 16 characters
            env["MEMORY_BATCHING__MAX_ITEMS"] = str(deployment.batch_items)
            env["MEMORY_BATCHING__THREADS"] = str(deployment.threads)
            env["MEMORY_BATCHING__MAX_WAIT_MS"] = str(deployment.wait_ms)
            if deployment.broker == "rabbitmq":
                env["MEMORY_CELERY__BROKER_URL"] = stack.enter_context(rabbitmq_vhost(f"mc-bench-{deployment.label}"))
            deployment.env, deployment.settings = env, settings_with(env)
            clear_prefix(base.redis.url, deployment.settings.redis.key_prefix)
            deployment.pid = stack.enter_context(worker(env, name=f"bench-{deployment.label}")).pid
            client = clients[deployment.label] = stack.enter_context(MemoryClient(deployment.settings))
            warm = client.long_term("bench", "k").get_or_create_memory_set("warm", capacity=1_000_000)
            warm.add(corpus(32, seed=99))  # the worker's model loaded before the first measure
            print(
                f"started {deployment.label}: broker {deployment.broker}, batch items {deployment.batch_items}, "
                f"{deployment.threads} batch threads, batch wait {deployment.wait_ms:g} ms",
                flush=True,
            )
        embedder.embed(corpus(64, seed=98))  # warm-up
        others = cpu_processes(base.redis.url)
        model_ms: list[float] = []  # the model's CPU an item, alone, one thread: what (b) and (c) cannot go below
        for n in range(args.writes):
            texts = corpus(args.items, seed=100 + n)
            began = time.process_time()
            embedder.embed(texts)
            model_ms.append((time.process_time() - began) * 1000 / len(texts))
            ceilings = {
                threads: max(embed_rate(embedder, texts, threads) for _ in range(2))
                for threads in sorted({d.threads for d in deployments} | {1, os.cpu_count() or 1})
            }
            best = max(ceilings.values())
            turn = n % len(deployments)
            for deployment in deployments[turn:] + deployments[:turn]:
                client, settings = clients[deployment.label], deployment.settings
                assert settings is not None
                with cpu_per_item(deployment.cpu.setdefault("b", []), len(texts), deployment.pid, others):
                    single_rate = single_adds(client, texts)
                clear_embeddings(settings.redis.url, settings.redis.key_prefix)
                with cpu_per_item(deployment.cpu.setdefault("c", []), len(texts), deployment.pid, others):
                    full_rate = batched_adds(client, texts, args.batch)
                clear_embeddings(settings.redis.url, settings.redis.key_prefix)
                for name in ("singles", "notes"):
                    client.long_term("bench", "k").delete_memory_set(name)
                ceiling = ceilings[deployment.threads] if args.write_cores else best
                deployment.rows.append((ceiling, single_rate, full_rate))
                print(
                    f"round {n + 1} {deployment.label}: (a) {ceiling:.0f}, (b) {single_rate:.0f}, "
                    f"(c) {full_rate:.0f} items/s",
                    flush=True,
                )
    _print(deployments, args)
    _print_cpu(deployments, statistics.median(model_ms))


def _print_cpu(deployments: list[Deployment], model_ms: float) -> None:
    """Where the CPU of an item goes, by process: on a saturated machine a ratio to (a) is at most the model's CPU
    over all the CPU an item costs, whatever the core count, and the worker's Python (one interpreter lock)
    caps one worker process at 1 / (its CPU an item, less the model's)."""
    print(f"\nCPU an item, ms (medians over the rounds); the model alone, one thread: {model_ms:.2f} ms an item")
    print(
        "\n| broker | batch items | batch threads | batch wait ms | load | worker | of it, not the model | client | Redis | RabbitMQ "
        "| all | model / all |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for d in deployments:
        for load, rows in sorted(d.cpu.items()):
            cell = {name: statistics.median(row.get(name, 0.0) for row in rows) for name in rows[0]}
            total = sum(cell.values())
            print(
                f"| {d.broker} | {d.batch_items} | {d.threads} | {d.wait_ms:g} | ({load}) | {cell['worker']:.2f} | "
                f"{cell['worker'] - model_ms:.2f} | {cell['client']:.2f} | {cell.get('Redis', 0.0):.2f} | "
                f"{cell.get('RabbitMQ', 0.0):.2f} | {total:.2f} | {model_ms / total:.2f} |"
            )


def _print(deployments: list[Deployment], args: argparse.Namespace) -> None:
    print(
        f"\n{args.items} template texts a round, {args.writes} rounds; (b) one add per item from 4 threads, "
        f"(c) adds of {args.batch}; (a) "
        + ("at the deployment's thread count" if args.write_cores else "at its best thread count")
    )
    print(
        "\n| broker | batch items | batch threads | batch wait ms | (a) items/s | (b) items/s | (c) items/s | (b)/(a) "
        "| (c)/(a) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for d in deployments:
        a = statistics.median(row[0] for row in d.rows)
        b = statistics.median(row[1] for row in d.rows)
        c = statistics.median(row[2] for row in d.rows)
        b_ratio = statistics.median(row[1] / row[0] for row in d.rows)
        c_ratio = statistics.median(row[2] / row[0] for row in d.rows)
        print(
            f"| {d.broker} | {d.batch_items} | {d.threads} | {d.wait_ms:g} | {a:.0f} | {b:.0f} | {c:.0f} | "
            f"**{b_ratio:.2f}** | **{c_ratio:.2f}** |"
        )
    print("\n(medians over the rounds; each ratio is the median of the rounds' ratios)")
    print("\nevery round:")
    for d in deployments:
        cells = ", ".join(f"{b / a:.2f}/{c / a:.2f}" for a, b, c in d.rows)
        print(f"- {d.label}: (b)/(a)/(c)/(a) {cells}")
