"""``memory-core status``: the processes started here, the workers by their heartbeats, queue depths, dead
letters, the store, embedder and reranker the workers serve, and a reindex that needs seeing to."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import redis

from memory_core.cli import EXIT_OK, EXIT_UNREACHABLE, emit
from memory_core.cli.local import LocalStack, answers
from memory_core.cli.reindex import describe as describe_reindex
from memory_core.client import MemoryClient
from memory_core.client.admin import Admin
from memory_core.core import routing
from memory_core.core.dispatch import open_redis
from memory_core.core.errors import MemoryCoreError, NoWorkerAvailable
from memory_core.core.keys import Keys, decoded
from memory_core.core.liveness import WorkerInfo, live_workers
from memory_core.core.messages import ReindexStatus
from memory_core.core.settings import Settings, load_settings, redact_url


def register(sub: Any) -> None:
    """Adds ``status`` to the ``memory-core`` parser."""
    status = sub.add_parser(
        "status",
        help="processes, queue depths, dead letters, the store's location and size, its embedder and reranker, "
        "a running reindex",
    )
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(run=_status)


def _status(args: argparse.Namespace, rest: list[str]) -> int:
    settings = load_settings()
    local = LocalStack(settings)
    url = redact_url(settings.redis.url)
    report: dict[str, Any] = {
        "processes": {p.name: {"pid": p.pid, "running": p.running, "log": str(p.log)} for p in local.processes()},
        "redis": {"url": url, "answers": answers(settings.redis.url)},
    }
    if report["redis"]["answers"]:
        report.update(_queues(settings))
        if report.get("workers"):
            report["reindex"] = _reindex_status(settings)
    emit(args, report, lambda: _status_rows(report))
    if not report["redis"]["answers"]:
        print(
            f"memory-core status: Redis does not answer at {url}: start it (`memory-core up` starts one on this "
            "machine), or point MEMORY_REDIS__URL at the deployment's",
            file=sys.stderr,
        )
        return EXIT_UNREACHABLE
    return EXIT_OK


REINDEX_STATUS_TIMEOUT = 15.0
"""Seconds ``status`` waits for a worker to say where a reindex stands."""


def _reindex_status(settings: Settings) -> dict[str, Any] | None:
    """Where a reindex of the store stands, as a worker says (``memory-core reindex --status``); None when no
    worker takes the question."""
    try:
        with MemoryClient(settings) as client:
            status = Admin(client).reindex("status", timeout=REINDEX_STATUS_TIMEOUT)
    except NoWorkerAvailable:
        return None
    except MemoryCoreError as exc:  # the rest of the status stands without it
        return {"error": f"{type(exc).__name__}: {exc}"}
    return status.model_dump(mode="json")


def _stores(workers: list[WorkerInfo]) -> list[dict[str, Any]]:
    """The stores the live workers serve, as they say in their heartbeats (never this shell's settings, which
    may name another directory than the workers')."""
    stores: dict[tuple[str, str, str], dict[str, Any]] = {}
    for w in workers:
        backend = w.store or ("edge" if w.embedded_store else "")
        location = w.store_location or w.embedded_store
        if not backend:  # a worker of an earlier version on a Qdrant server says nothing of its store
            continue
        host = w.host if backend != "server" else ""  # a path is a store per machine; a URL is one store
        entry = stores.setdefault(
            (backend, location, host),
            {
                "backend": backend,
                "location": location,
                "host": host or None,
                "bytes": None,
                "workers": [],
                "embedders": [],
                "rerankers": [],
            },
        )
        entry["workers"].append(w.name)
        if w.embedder and w.embedder not in entry["embedders"]:  # a worker of an earlier version says nothing
            entry["embedders"].append(w.embedder)
        if w.reranker is not None and w.reranker not in entry["rerankers"]:  # nor of its reranker
            entry["rerankers"].append(w.reranker)
        if w.store_bytes is not None:
            entry["bytes"] = w.store_bytes
    return list(stores.values())


def _queues(settings: Settings) -> dict[str, Any]:
    client = open_redis(settings)
    # The queues live on the broker, which may be another Redis than the caches' (MEMORY_CELERY__BROKER_URL).
    separate = settings.broker_is_redis and settings.broker_url != settings.redis.url
    broker = open_redis(settings, url=settings.broker_url) if separate else client
    keys = Keys(settings.redis.key_prefix)
    try:
        broker_is_redis = settings.broker_is_redis
        prefix = settings.broker_key_prefix
        depths = {q: int(broker.llen(prefix + q)) for q in routing.QUEUES} if broker_is_redis else {}
        unacked = int(broker.hlen(prefix + "unacked")) if broker_is_redis else None
        namespaces = sorted(decoded(n) for n in client.smembers(keys.dead_letter_namespaces()))
        letters = {n: int(client.llen(keys.dead_letters(n))) for n in namespaces}
        # Letters that name no namespace are listed, and dropped, as those of !ops (`dead-letters list`).
        letters[routing.OPS_NAMESPACE] = int(client.llen(keys.unroutable_dead_letters()))
        letters = {n: c for n, c in letters.items() if c}
        workers = live_workers(client, keys)
    except redis.RedisError as exc:
        return {"error": str(exc)}
    finally:
        client.close()
        if separate:
            broker.close()
    now = time.time()
    return {
        "workers": [
            {
                "name": w.name,
                "host": w.host,
                "pid": w.pid,
                "queues": list(w.queues),
                "embedded_store": w.embedded_store or None,
                "store": w.store or None,
                "store_location": w.store_location or None,
                "store_bytes": w.store_bytes,
                "embedder": w.embedder or None,
                "reranker": w.reranker,
                "up_seconds": round(now - w.started_at),
            }
            for w in workers
        ],
        "stores": _stores(workers),
        "queues": depths,
        "unacked": unacked,
        "dead_letters": {
            "total": sum(letters.values()),
            "by_namespace": letters,
            "unroutable": letters.get(routing.OPS_NAMESPACE, 0),
        },
    }


def _status_rows(report: dict[str, Any]) -> list[str]:
    rows = [f"redis    {report['redis']['url']}: {'answers' if report['redis']['answers'] else 'DOES NOT ANSWER'}"]
    if "workers" in report:
        workers = report["workers"]
        rows.append(f"workers  {len(workers) or 'none'} alive (by their heartbeats, whoever started them)")
        for w in workers:
            rows.append(
                f"  {w['name']}  pid {w['pid']} on {w['host']}, up {w['up_seconds']}s: {', '.join(w['queues'])}"
            )
    started = [f"{name} (pid {p['pid']})" for name, p in report["processes"].items() if p["running"]]
    if started:
        rows.append(f"up       started here and running: {', '.join(started)}")
    for queue, depth in report.get("queues", {}).items():
        rows.append(f"queue    {queue:<20} {depth} waiting")
    if report.get("unacked") is not None:
        rows.append(f"unacked  {report['unacked']} delivered, not yet acknowledged")
    if "dead_letters" in report:
        letters = report["dead_letters"]
        detail = ", ".join(f"{n}: {c}" for n, c in letters["by_namespace"].items()) or "none"
        rows.append(f"dead     {letters['total']} dead letters ({detail})")
    if "stores" in report:
        for store in report["stores"]:
            size = f", {store['bytes'] / 1e6:.1f} MB" if store["bytes"] is not None else ""
            where = f" on {store['host']}" if store["host"] else ""
            rows.append(f"store    {store['backend']} at {store['location']}{where}{size}")
            # The fingerprint the workers run; the store refuses workers of any other.
            rows.extend(f"embedder {embedder}" for embedder in store["embedders"])
            rows.extend(f"reranker {reranker or 'off'}" for reranker in store["rerankers"])
        if not report["stores"]:
            rows.append("store    unknown: no live worker reports the store it serves")
    return rows + _reindex_rows(report.get("reindex"))


def _reindex_rows(reindex: dict[str, Any] | None) -> list[str]:
    """A reindex that needs seeing to (copying, complete, or switched with the old collection kept), as
    ``memory-core reindex --status`` says it; nothing for none, an aborted one or one finished for good."""
    if reindex is None:
        return []
    if "error" in reindex:
        return [f"reindex  unknown: {reindex['error']}"]
    status = ReindexStatus.model_validate(reindex)
    if status.state in ("building", "complete") or (status.state == "switched" and not status.source_dropped):
        return describe_reindex(status)
    return []
