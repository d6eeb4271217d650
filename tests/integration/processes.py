"""Processes that tests start and always stop: redis-server on a spare port, celery worker and beat."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from memory_core.core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CELERY = str(Path(sys.executable).parent / "celery")


CLI = str(Path(sys.executable).parent / "memory-core")


def client_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The whole environment of a ``memory-core`` server process (MCP, HTTP) that is a client of ``settings``'
    deployment: nothing inherited but the PATH to this interpreter's scripts."""
    return {
        "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
        "MEMORY_REDIS__URL": settings.redis.url,
        "MEMORY_REDIS__KEY_PREFIX": settings.redis.key_prefix,
        "MEMORY_CLIENT__TIMEOUT": "30",
        "MEMORY_METRICS__ENABLED": "false",
        **extra,
    }


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(process: subprocess.Popen[bytes], timeout: float = 20) -> None:
    """SIGTERM, then SIGKILL if it does not go."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def start_redis(port: int, log: Path, *options: str, **client_options: Any) -> subprocess.Popen[bytes]:
    """A throwaway redis-server on 127.0.0.1:``port``, answering when this returns.

    It keeps nothing on disk unless ``options`` (redis-server flags, e.g. ``--appendonly yes``)
    say otherwise; ``client_options`` are what the readiness probe needs (a password, TLS).
    """
    binary = shutil.which("redis-server")
    assert binary, "redis-server is needed (ops/check installs it when missing)"
    defaults = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    with log.open("a") as out:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen([binary, *defaults, *options], stdout=out, stderr=subprocess.STDOUT)
    client = redis.Redis(**{"port": port, "socket_connect_timeout": 0.5, **client_options})
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            return process
        except redis.RedisError:
            if time.monotonic() > deadline:
                stop(process)
                raise
            time.sleep(0.05)


@contextlib.contextmanager
def celery_process(
    kind: str, env: dict[str, str], log: Path, *extra: str, app: str = "workers.app"
) -> Iterator[subprocess.Popen[bytes]]:
    """``celery -A <app> <kind>`` with ``env`` added; for a worker, waits until it is ready."""
    command = [CELERY, "-A", app, kind, "-l", "INFO", *extra]
    with log.open("w") as out:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(command, cwd=ROOT, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT)
    try:
        if kind == "worker":
            deadline = time.monotonic() + 60
            while " ready." not in log.read_text(errors="replace"):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{kind} did not start: {log.read_text(errors='replace')[-2000:]}")
                time.sleep(0.1)
        yield process
    finally:
        stop(process)
