"""Local processes for ops scripts: a Redis if none answers, and a memory-core worker (and the options that
choose its embedder).

Used by ops/demo, ops/bench and ops/check. Everything started here is stopped here.

    python ops/stack.py with-redis redis://localhost:6379/15 -- pytest -q
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import redis

from memory_core.cli.local import answers, redis_binary

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = ROOT / "ops" / ".run"
VENV_BIN = Path(sys.executable).parent


_answers = answers


@contextlib.contextmanager
def redis_server(url: str) -> Iterator[bool]:
    """Makes sure Redis answers at ``url``; starts a local one (and stops it after) if none does.

    Yields True when this call started the server.
    """
    if _answers(url):
        yield False
        return
    parts = urlsplit(url)
    if parts.hostname not in {"localhost", "127.0.0.1", "::1"}:
        raise SystemExit(f"Redis at {parts.hostname}:{parts.port} does not answer, and it is not local to start")
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    port = parts.port or 6379
    process = subprocess.Popen(
        [redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=(RUN_DIR / f"redis-{port}.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 10
        while not _answers(url):
            if time.monotonic() > deadline or process.poll() is not None:
                raise SystemExit(f"started redis-server on port {port}, but it does not answer")
            time.sleep(0.05)
        print(f"started a local redis-server on port {port} (stopped at exit)", flush=True)
        yield True
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextlib.contextmanager
def worker(
    env: dict[str, str], *, name: str = "worker", concurrency: int | None = None, package: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Runs ``celery -A memory_core.workers.app worker`` with ``env`` until the block ends; waits until it is ready.

    ``concurrency`` overrides ``MEMORY_CELERY__CONCURRENCY`` (the settings' value by default). ``package``: a
    directory holding another ``memory_core`` (an earlier build, to compare with) for the worker to run.
    """
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    log = RUN_DIR / f"{name}.log"
    command = [
        str(VENV_BIN / "celery"),
        "-A",
        "memory_core.workers.app",
        "worker",
        "-l",
        "INFO",
        "--hostname",
        f"{name}@%h",
        *(["--concurrency", str(concurrency)] if concurrency is not None else []),
        "--without-mingle",
        "--without-gossip",
    ]
    # Celery puts its working directory first on sys.path, ahead of PYTHONPATH: a worker given another
    # package also runs from its directory, or it would import this tree's.
    cwd, path = (ROOT, {}) if package is None else (package, {"PYTHONPATH": str(package)})
    process = subprocess.Popen(
        command, cwd=cwd, env={**os.environ, **env, **path}, stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 60
        while " ready." not in log.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the worker did not start; see {log}")
            time.sleep(0.1)
        yield process
    finally:
        process.send_signal(signal.SIGTERM)  # warm shutdown: finish the task at hand, flush the store
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def isolated_env(name: str) -> dict[str, str]:
    """This process's ``MEMORY_*`` variables, plus a fresh data directory and a Redis key prefix of ``name``'s own.

    Also sets them in ``os.environ``, so ``load_settings()`` here sees what the worker sees.
    """
    data_dir = RUN_DIR / f"{name}-qdrant"
    shutil.rmtree(data_dir, ignore_errors=True)
    env = {
        **{k: v for k, v in os.environ.items() if k.startswith("MEMORY_")},
        "MEMORY_QDRANT__PATH": str(data_dir),
        "MEMORY_REDIS__KEY_PREFIX": f"mc{name}",
    }
    os.environ.update(env)
    return env


def clear_prefix(url: str, prefix: str) -> None:
    """Deletes every Redis key under ``prefix``: no embedding or result cached by an earlier run survives."""
    client = redis.Redis.from_url(url)
    for key in client.scan_iter(f"{prefix}:*", count=1000):
        client.delete(key)
    client.close()


def add_embedder_options(parser: argparse.ArgumentParser) -> None:
    """``--embedder``, ``--embedder-path``, ``--embedder-base-url`` and ``--embedder-roles``: the worker's embedder
    (``choose_embedder``)."""
    parser.add_argument(
        "--embedder",
        metavar="SPEC",
        help="the worker's embedder (MEMORY_EMBEDDER__MODEL): all-MiniLM-L6-v2 (the default), hashing, "
        "fastembed:<name> or openai:<model>",
    )
    parser.add_argument(
        "--embedder-path", type=Path, metavar="DIR", help="a local model directory (MEMORY_EMBEDDER__PATH)"
    )
    parser.add_argument(
        "--embedder-base-url",
        metavar="URL",
        help="an OpenAI-compatible endpoint (MEMORY_EMBEDDER__BASE_URL); its key is read from MEMORY_EMBEDDER__API_KEY",
    )
    parser.add_argument(
        "--embedder-roles",
        metavar="PRESET",
        help="how the model tells queries from documents (MEMORY_EMBEDDER__ROLES: e5, nomic, bge, input-type, voyage, "
        "cohere, jina)",
    )


def choose_embedder(args: argparse.Namespace) -> None:
    """Sets the embedder options as settings in this process's environment, which ``isolated_env`` hands on to
    the worker. A path is made absolute: the worker runs in the project's directory."""
    path = args.embedder_path.resolve() if args.embedder_path is not None else None
    chosen = (
        ("MODEL", args.embedder),
        ("PATH", path),
        ("BASE_URL", args.embedder_base_url),
        ("ROLES", args.embedder_roles),
    )
    for field, value in chosen:
        if value is not None:
            os.environ[f"MEMORY_EMBEDDER__{field}"] = str(value)


def _main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "with-redis" or "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    url, command = argv[1], argv[argv.index("--") + 1 :]
    with redis_server(url):
        return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
