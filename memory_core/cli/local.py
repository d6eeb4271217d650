"""A local stack for ``memory-core up``: Redis (if none answers), a worker, beat and Flower.

Each process runs in its own session with its log and pid file in ``MEMORY_STACK__RUN_DIR``,
so ``down`` and ``status`` find them from any shell. Processes are started as commands
(``celery -A memory_core.workers.app ...``): this package never imports Celery.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import redis

from memory_core.core.errors import ConfigurationError
from memory_core.core.settings import Settings

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}
ORDER = ("redis", "worker", "beat", "flower")
"""Start order; ``down`` stops them in reverse."""


def answers(url: str) -> bool:
    """Whether Redis answers a PING at ``url``."""
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2).ping())
    except redis.RedisError:
        return False


def free_port(address: str) -> int:
    """A port free on ``address`` now, for a process started next to listen on."""
    family, kind, _, _, where = socket.getaddrinfo(address, 0, type=socket.SOCK_STREAM)[0]
    with socket.socket(family, kind) as probe:
        probe.bind(where)
        return int(probe.getsockname()[1])


def redis_binary() -> str:
    """``redis-server``, installed from Debian when missing and this process may (root with apt-get)."""
    found = shutil.which("redis-server")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("redis-server is missing; installing Debian's redis-server package", file=sys.stderr, flush=True)
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "redis-server"], check=True)
        found = shutil.which("redis-server")
    if not found:
        raise ConfigurationError(
            "redis-server is not installed: apt-get install redis-server (or point MEMORY_REDIS__URL at one)"
        )
    return found


def redis_command(url: str, data_dir: Path | None) -> list[str]:
    """The command line of a loopback ``redis-server`` for ``url``: AOF in ``data_dir``, or nothing on disk."""
    parts = urlsplit(url)
    if parts.hostname not in LOCAL_HOSTS:
        raise ConfigurationError(
            f"Redis at {parts.hostname}:{parts.port} does not answer, and it is not local to start"
        )
    command = [redis_binary(), "--port", str(parts.port or 6379), "--bind", "127.0.0.1"]
    if data_dir is None:
        return [*command, "--save", "", "--appendonly", "no"]
    data_dir.mkdir(parents=True, exist_ok=True)
    return [*command, "--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--dir", str(data_dir)]


def celery_command(kind: str, *extra: str) -> list[str]:
    """``celery -A memory_core.workers.app <kind>`` from this interpreter's environment.

    Raises ``ConfigurationError`` naming the extra to install when this environment has only the client.
    """
    extra_name, package = ("flower", "flower") if kind == "flower" else ("worker", "celery")
    if importlib.util.find_spec(package) is None:
        raise ConfigurationError(
            f"memory-core {kind} needs the {package} package, which the client-only install leaves out: "
            f"pip install 'memory-core[{extra_name}]'"
        )
    celery = Path(sys.executable).parent / "celery"
    return [str(celery) if celery.exists() else "celery", "-A", "memory_core.workers.app", kind, *extra]


@dataclass(frozen=True)
class Process:
    """One process of the local stack, as its pid file describes it."""

    name: str
    pid: int | None
    log: Path
    log_start: int = 0  # where this run's lines begin: the log keeps earlier runs' lines before them
    env: Mapping[str, str] = field(default_factory=dict)  # what ``start`` set in its environment, besides ours

    def log_text(self) -> str:
        """What this run has logged so far."""
        try:
            with self.log.open("rb") as handle:
                handle.seek(self.log_start)
                return handle.read().decode(errors="replace")
        except OSError:
            return ""

    @property
    def running(self) -> bool:
        """Whether the recorded pid is alive (and not a zombie)."""
        if self.pid is None:
            return False
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().split(") ", 1)[1][0]
        except (OSError, IndexError):
            return False
        return state != "Z"


class LocalStack:
    """Starts, finds and stops the processes of ``up``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.run_dir = settings.stack.run_dir.resolve()

    def process(self, name: str) -> Process:
        """What the pid file of ``name`` says."""
        pid_file = self.run_dir / f"{name}.pid"
        try:
            pid: int | None = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            pid = None
        return Process(name, pid, self.run_dir / f"{name}.log")

    def processes(self) -> list[Process]:
        """Every process of the stack, started or not, in start order."""
        return [self.process(name) for name in ORDER]

    def start(self, name: str, command: list[str], env: dict[str, str] | None = None) -> Process:
        """Starts ``command`` in its own session, logging to ``<run dir>/<name>.log``; refuses a second copy."""
        current = self.process(name)
        if current.running:
            raise ConfigurationError(f"{name} runs already (pid {current.pid}); memory-core down stops it")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with current.log.open("ab") as log:
            start = log.tell()
            child = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        (self.run_dir / f"{name}.pid").write_text(f"{child.pid}\n")
        return Process(name, child.pid, current.log, log_start=start, env=dict(env or {}))

    def wait_until(self, process: Process, ready: str, timeout: float = 60.0) -> None:
        """Waits for ``ready`` in this run's log lines; raises with their tail if it dies or times out.

        An earlier run's lines do not count: ``up`` after ``down`` returned at once, on the last run's
        "ready", before the new worker consumed anything.
        """
        deadline = time.monotonic() + timeout
        while ready not in process.log_text():
            if not process.running or time.monotonic() > deadline:
                tail = process.log_text()[-1500:]
                raise ConfigurationError(f"{process.name} did not start; the end of {process.log}:\n{tail}")
            time.sleep(0.1)

    def stop(self, name: str, timeout: float = 30.0) -> bool:
        """SIGTERM (warm shutdown), then SIGKILL after ``timeout``; True if it was running."""
        process = self.process(name)
        pid_file = self.run_dir / f"{name}.pid"
        if not process.running or process.pid is None:
            pid_file.unlink(missing_ok=True)
            return False
        os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while process.running and time.monotonic() < deadline:
            time.sleep(0.1)
        if process.running:
            os.kill(process.pid, signal.SIGKILL)
        pid_file.unlink(missing_ok=True)
        return True
