"""``up``, ``down``, ``worker``, ``beat``, ``flower``, ``mcp``: the processes of memory-core (``status``, which
looks at them, is in ``status``)."""

from __future__ import annotations

import argparse
import os
import re
import secrets
import sys
from typing import Any

from memory_core.cli import EXIT_OK, EXIT_USAGE, status
from memory_core.cli.local import LocalStack, Process, answers, celery_command, free_port, redis_command
from memory_core.core.dispatch import open_redis
from memory_core.core.errors import ConfigurationError
from memory_core.core.keys import Keys
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
    status.register(sub)
    for name, text in (
        ("worker", "run a worker in the foreground (celery worker options may follow)"),
        ("beat", "run the beat scheduler in the foreground (celery beat options may follow)"),
    ):
        parser = sub.add_parser(
            name,
            help=text,
            description=f"{text[0].upper()}{text[1:]}. Every option after `memory-core {name}` but -h is passed "
            f"to `celery {name}` as it is: e.g. {PASSED_THROUGH[name]}. `celery -A memory_core.workers.app {name} "
            "--help` lists them.",
        )
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


PASSED_THROUGH = {
    "worker": "--concurrency 8, -Q memory.read,memory.write (the queues to consume), -l DEBUG",
    "beat": "-l DEBUG",
}
"""Examples of Celery's options, for the help of ``worker`` and ``beat``."""


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
    worker: Process | None = None
    if holders:  # one process owns an embedded store: a second worker on it could only fail
        held = holders[0]
        print(
            f"worker   not started: {held.name} (pid {held.pid} on {held.host}) serves {settings.qdrant.path.resolve()}"
        )
    else:
        worker = local.start("worker", celery_command("worker", *worker_args(settings)), _metrics_port(settings))
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
        print(f"metrics  {_metrics_line(settings, worker)}")
    return EXIT_OK


def _metrics_port(settings: Settings) -> dict[str, str]:
    """The worker's environment for its metrics: with ``MEMORY_METRICS__PORT=0``, ``up`` picks the free port
    itself, so it can say which (the worker picks one before its logging is set up: its log does not say)."""
    metrics = settings.metrics
    if not metrics.enabled or metrics.port != 0:
        return {}
    try:
        return {"MEMORY_METRICS__PORT": str(free_port(metrics.address))}
    except OSError:  # an address this machine has not: the worker says so in its log
        return {}


def _metrics_line(settings: Settings, worker: Process | None) -> str:
    """Where the worker started here serves its metrics: a port taken by another process serves nothing (the
    worker logs why); a worker started elsewhere serves them where its own settings say."""
    metrics = settings.metrics
    if worker is not None:
        refused = re.search(r"metrics not served: .*", worker.log_text())
        if refused:
            return refused.group(0)
        port = worker.env.get("MEMORY_METRICS__PORT", str(metrics.port))
        return f"http://{metrics.address}:{port}/metrics"
    if metrics.port == 0:
        return f"http://{metrics.address}:<the port its worker picked>/metrics"
    return f"http://{metrics.address}:{metrics.port}/metrics"


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
