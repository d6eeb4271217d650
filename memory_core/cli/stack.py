"""``up``, ``down``, ``status``, ``worker``, ``beat``, ``flower``: the processes of memory-core."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from typing import Any

import redis

from memory_core.cli import EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, emit
from memory_core.cli.local import LocalStack, answers, celery_command, redis_command
from memory_core.core import routing
from memory_core.core.dispatch import open_redis
from memory_core.core.errors import ConfigurationError
from memory_core.core.keys import Keys, decoded
from memory_core.core.liveness import WorkerInfo, holding, live_workers
from memory_core.core.settings import Settings, load_settings, redact_url


def register(sub: Any) -> None:
    """Adds the process commands to the ``memory-core`` parser."""
    up = sub.add_parser("up", help="start a local stack: Redis if none answers, a worker, beat, Flower")
    up.add_argument("--no-beat", action="store_true", help="no beat (no scheduled maintenance)")
    up.add_argument("--no-flower", action="store_true", help="no Flower")
    up.add_argument("--dev-flower", action="store_true", help="Flower on loopback only, with a one-time password")
    up.set_defaults(run=_up)
    down = sub.add_parser("down", help="stop what `up` started (warm shutdown: tasks in hand finish)")
    down.set_defaults(run=_down)
    status = sub.add_parser("status", help="processes, queue depths, dead letters, the store's location and size")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(run=_status)
    for name, text in (
        ("worker", "run a worker in the foreground (celery worker options may follow)"),
        ("beat", "run the beat scheduler in the foreground"),
    ):
        parser = sub.add_parser(name, help=text)
        parser.set_defaults(run=_foreground, passthrough=True, kind=name)
    flower = sub.add_parser("flower", help="run Flower: basic auth from MEMORY_FLOWER__BASIC_AUTH, or --dev")
    flower.add_argument("--dev", action="store_true", help="only on 127.0.0.1, with a password made for the run")
    flower.set_defaults(run=_flower, passthrough=True)
    mcp = sub.add_parser("mcp", help="serve the memory tools over MCP: stdio, or streamable HTTP with --http")
    mcp.add_argument(
        "--http", action="store_true", help="streamable HTTP at /mcp, bearer tokens from MEMORY_AUTH__TOKENS"
    )
    mcp.add_argument("--dev", action="store_true", help="with --http: no auth, loopback only, MEMORY_MCP__NAMESPACE")
    mcp.add_argument("--host", help="listen address with --http (default MEMORY_MCP__ADDRESS)")
    mcp.add_argument("--port", type=int, help="port with --http (default MEMORY_MCP__PORT)")
    mcp.set_defaults(run=_mcp)


def worker_args(settings: Settings) -> list[str]:
    """``celery worker`` options of the project: log level, a hostname of its own, no mingle or gossip."""
    return ["-l", "INFO", "--hostname", f"memory-core-{os.getpid()}@%h", "--without-mingle", "--without-gossip"]


def beat_args(settings: Settings) -> list[str]:
    """``celery beat`` options: the schedule file in the run folder."""
    settings.stack.run_dir.mkdir(parents=True, exist_ok=True)
    return ["-l", "INFO", "--schedule", str(settings.stack.run_dir.resolve() / "celerybeat-schedule")]


FLOWER_DEV_USER = "dev"
"""The user of ``memory-core flower --dev``; its password is made for each run."""


def flower_launch(settings: Settings, *, dev: bool, extra: list[str]) -> tuple[list[str], dict[str, str]]:
    """Flower's command and environment: credentials go through the environment, never the command line.

    ``dev`` listens on 127.0.0.1 only and still asks for a password: one made for this run, printed to the
    terminal (stderr) and nowhere else. Flower has no allow-list of ``Host`` names, so an open dashboard on
    loopback could be read and driven (revoke tasks, shut workers down) by a web page that rebinds its DNS
    name to 127.0.0.1; the browser keeps credentials per origin and gives that page none.
    """
    env = {k: v for k, v in os.environ.items() if k != "FLOWER_BASIC_AUTH"}
    address = settings.flower.address
    if dev:
        address = "127.0.0.1"
        password = secrets.token_urlsafe(16)
        env["FLOWER_BASIC_AUTH"] = f"{FLOWER_DEV_USER}:{password}"
        print(
            f"memory-core flower: dev mode: http://127.0.0.1:{settings.flower.port} only; "
            f"user {FLOWER_DEV_USER}, password {password} (made for this run)",
            file=sys.stderr,
        )
    elif settings.flower.basic_auth is None:
        raise _Refused(
            "refusing to start Flower without authentication: set MEMORY_FLOWER__BASIC_AUTH=user:password, "
            "or pass --dev for a loopback-only dashboard with a password made for the run"
        )
    else:
        env["FLOWER_BASIC_AUTH"] = settings.flower.basic_auth.get_secret_value()
    command = celery_command("flower", f"--address={address}", f"--port={settings.flower.port}", *extra)
    return command, env


class _Refused(Exception):
    pass


def _foreground(args: argparse.Namespace, rest: list[str]) -> int:
    settings = load_settings()
    extra = worker_args(settings) if args.kind == "worker" else beat_args(settings)
    command = celery_command(args.kind, *extra, *rest)
    os.execv(command[0], command)  # replaces this process: signals go straight to Celery


def _flower(args: argparse.Namespace, rest: list[str]) -> int:
    settings = load_settings()
    try:
        command, env = flower_launch(settings, dev=args.dev, extra=rest)
    except _Refused as exc:
        print(f"memory-core flower: {exc}", file=sys.stderr)
        return EXIT_USAGE
    os.execve(command[0], command, env)


def _up(args: argparse.Namespace, rest: list[str]) -> int:
    settings = load_settings()
    celery_command("worker")  # a client-only install is told what to install before anything starts
    local = LocalStack(settings)
    url = settings.redis.url
    if not answers(url):
        process = local.start("redis", redis_command(url, local.run_dir / "redis"))
        local.wait_until(process, "Ready to accept connections", timeout=15)
        print(f"redis    pid {process.pid}  {redact_url(url)} (AOF in {local.run_dir / 'redis'})")
    else:
        print(f"redis    answers at {redact_url(url)} (not started here)")
    holders = _holders(settings)
    if holders:  # one process owns an embedded store: a second worker on it could only fail
        held = holders[0]
        print(
            f"worker   not started: {held.name} (pid {held.pid} on {held.host}) serves {settings.qdrant.path.resolve()}"
        )
    else:
        worker = local.start("worker", celery_command("worker", *worker_args(settings)))
        local.wait_until(worker, " ready.", timeout=120)
        print(f"worker   pid {worker.pid}  log {worker.log}")
    if not args.no_beat:
        beat = local.start("beat", celery_command("beat", *beat_args(settings)))
        print(f"beat     pid {beat.pid}  log {beat.log}")
    if not args.no_flower:
        try:
            command, env = flower_launch(settings, dev=args.dev_flower, extra=[])
        except _Refused:
            print("flower   not started: set MEMORY_FLOWER__BASIC_AUTH, or pass --dev-flower")
        except ConfigurationError as exc:  # the dashboard is optional: the rest of the stack runs without it
            print(f"flower   not started: {exc}")
        else:
            flower = local.start("flower", command, env)
            print(
                f"flower   pid {flower.pid}  http://{settings.flower.address}:{settings.flower.port}  log {flower.log}"
            )
    if settings.metrics.enabled:
        print(f"metrics  http://{settings.metrics.address}:{settings.metrics.port}/metrics")
    return EXIT_OK


def _holders(settings: Settings) -> list[WorkerInfo]:
    """The live workers that hold this deployment's embedded store (none on a Qdrant server)."""
    if settings.qdrant.backend != "edge":
        return []
    client = open_redis(settings)
    try:
        return holding(live_workers(client, Keys(settings.redis.key_prefix)), str(settings.qdrant.path.resolve()))
    finally:
        client.close()


def _down(args: argparse.Namespace, rest: list[str]) -> int:
    local = LocalStack(load_settings())
    for process in reversed(local.processes()):
        if local.stop(process.name):
            print(f"stopped {process.name} (pid {process.pid})")
    return EXIT_OK


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
    emit(args, report, lambda: _status_rows(report))
    if not report["redis"]["answers"]:
        print(
            f"memory-core status: Redis does not answer at {url}: start it (`memory-core up` starts one on this "
            "machine), or point MEMORY_REDIS__URL at the deployment's",
            file=sys.stderr,
        )
        return EXIT_UNREACHABLE
    return EXIT_OK


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
            },
        )
        entry["workers"].append(w.name)
        if w.embedder and w.embedder not in entry["embedders"]:  # a worker of an earlier version says nothing
            entry["embedders"].append(w.embedder)
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
        if not report["stores"]:
            rows.append("store    unknown: no live worker reports the store it serves")
    return rows


def _mcp(args: argparse.Namespace, rest: list[str]) -> int:
    try:
        from memory_core.servers import mcp
    except ImportError as exc:
        raise ConfigurationError(
            f"memory-core mcp needs the MCP SDK (missing {exc.name!r}): pip install 'memory-core[mcp]'"
        ) from exc
    settings = load_settings()
    host = args.host or settings.mcp.address
    port = args.port or settings.mcp.port
    mcp.check(settings, http=args.http, dev=args.dev, host=host)
    url = f"http://{host}:{port}"
    server, scopes = mcp.build_server(settings, http_url=url if args.http else None)
    try:
        if args.http:
            print(f"memory-core mcp: serving {url}/mcp", file=sys.stderr, flush=True)
            server.run("streamable-http", host=host, port=port, transport_security=mcp.transport_security(host, port))
        else:
            server.run()
    finally:
        scopes.close()
    return EXIT_OK
