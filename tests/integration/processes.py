"""Processes that tests start and always stop: redis-server on a spare port, celery worker and beat."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
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


class PrivateRedis:
    """A redis-server of the test session's own, on a spare port, handing out its databases one by one.

    A test that needs a Redis apart from the session's (``MEMORY_TEST_REDIS_URL``: queues no worker of the
    session consumes, fixed names, a broker apart from the cache) takes a database of this server, never
    another database of the server that URL names: the rest of that server is a developer's, not the tests'.
    """

    DATABASES = 1024  # more than a session hands out; an empty database costs next to nothing

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.process = start_redis(self.port, log, "--databases", str(self.DATABASES))
        self._next = 1  # 0, what a URL without a database means, is never handed out: a stray client shows there
        self._lock = threading.Lock()

    def database_url(self) -> str:
        """The URL of a database that no test of this session was given before, flushed."""
        with self._lock:
            db, self._next = self._next, self._next + 1
        if db >= self.DATABASES:
            raise RuntimeError(f"database {db} asked of a private redis-server of {self.DATABASES}: raise DATABASES")
        url = f"redis://127.0.0.1:{self.port}/{db}"
        with redis.Redis.from_url(url) as client:
            client.flushdb()
        return url

    def close(self) -> None:
        """Stops the server (by its process, nothing else); it kept nothing on disk."""
        stop(self.process)


@contextlib.contextmanager
def celery_process(
    kind: str, env: dict[str, str], log: Path, *extra: str, app: str = "memory_core.workers.app"
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


RABBITMQ_PORT = 5672


def rabbitmq_missing() -> str | None:
    """Why no RabbitMQ test can run here (nothing on loopback 5672, no ``rabbitmqctl``), or None when they can."""
    if shutil.which("rabbitmqctl") is None:
        return "rabbitmqctl is not on the PATH: RabbitMQ tests create a vhost of their own with it"
    try:
        socket.create_connection(("127.0.0.1", RABBITMQ_PORT), timeout=1).close()
    except OSError:
        return f"no RabbitMQ listens on 127.0.0.1:{RABBITMQ_PORT}"
    return None


def rabbitmqctl(*args: str, node: str | None = None, cookie: str | None = None, timeout: float = 60) -> str:
    """Runs ``rabbitmqctl`` (against ``node`` with its ``cookie``, else the default node); returns its output,
    raises on failure."""
    command = ["rabbitmqctl", *(["-n", node] if node else []), *(["--erlang-cookie", cookie] if cookie else [])]
    command += ["-q", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr or done.stdout}")
    return done.stdout


def _ctl_target(node: RabbitNode | None) -> dict[str, Any]:
    """``rabbitmqctl``'s node and cookie for ``node``; none for the shared node."""
    return {"node": node.name, "cookie": node.cookie} if node else {}


@contextlib.contextmanager
def rabbitmq_vhost(name: str, *, node: RabbitNode | None = None) -> Iterator[str]:
    """A fresh vhost on the shared RabbitMQ (or ``node``) that guest may use; yields its broker URL and deletes
    it (and every queue in it) afterwards."""
    where = _ctl_target(node)
    rabbitmqctl("add_vhost", name, **where)
    try:
        rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*", **where)
        yield f"amqp://guest:guest@127.0.0.1:{node.port if node else RABBITMQ_PORT}/{name}"
    finally:
        rabbitmqctl("delete_vhost", name, **where)


def rabbitmq_queue_depths(vhost: str, *, node: RabbitNode | None = None) -> dict[str, tuple[int, int]]:
    """Each queue of ``vhost``: (messages ready, messages delivered but unacknowledged)."""
    output = rabbitmqctl(
        "list_queues", "-p", vhost, "name", "messages_ready", "messages_unacknowledged", **_ctl_target(node)
    )
    depths: dict[str, tuple[int, int]] = {}
    for line in output.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[1].isdigit():
            depths[fields[0]] = (int(fields[1]), int(fields[2]))
    return depths


_RABBITMQ_SERVERS = ("/usr/lib/rabbitmq/bin/rabbitmq-server", "/usr/lib/rabbitmq/sbin/rabbitmq-server")


class RabbitNode:
    """A RabbitMQ node of a test's own, on spare loopback ports, with its data under ``base``: a test may stop
    and restart it (the shared node on 5672 is never stopped). Its data survives a restart."""

    def __init__(self, base: Path) -> None:
        server = next((path for path in _RABBITMQ_SERVERS if Path(path).exists()), shutil.which("rabbitmq-server"))
        if server is None:
            raise FileNotFoundError("rabbitmq-server")
        self.server = server
        self.name = f"memory-test-{uuid.uuid4().hex[:8]}@localhost"
        self.port, self.dist_port = free_port(), free_port()
        self.cookie = uuid.uuid4().hex.upper()
        self.base = base
        home = base / "home"
        home.mkdir(parents=True)
        (home / ".erlang.cookie").write_text(self.cookie)
        (home / ".erlang.cookie").chmod(0o400)
        (base / "rabbitmq.conf").write_text(f"listeners.tcp.default = 127.0.0.1:{self.port}\nloopback_users = none\n")
        (base / "enabled_plugins").write_text("[].\n")
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "HOME": str(self.base / "home"),
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.base / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.base / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.base / "enabled_plugins"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(self.base / "plugins-expand"),
        }

    def start(self, timeout: float = 90) -> float:
        """Starts the node in the foreground (a process group of its own); returns the seconds until it accepts
        AMQP connections."""
        began = time.monotonic()
        with (self.base / f"node-{self.starts}.log").open("w") as out:
            self.process = subprocess.Popen(
                [self.server],
                cwd=self.base,
                env=self._env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.starts += 1
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return time.monotonic() - began
            except OSError:
                if self.process.poll() is not None or time.monotonic() - began > timeout:
                    self.stop(kill=True)
                    raise RuntimeError(f"RabbitMQ node {self.name} did not start") from None
                time.sleep(0.1)

    def stop(self, *, kill: bool = False, timeout: float = 60) -> None:
        """Stops the node: SIGTERM (a clean shutdown) or SIGKILL, to its whole process group (the start script
        and the Erlang VM); waits until it is gone."""
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL if kill else signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        deadline = time.monotonic() + timeout
        while _group_alive(process.pid) and time.monotonic() < deadline:  # the VM may outlive the script
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
