"""``memory-core models pull <spec>``: fetch an embedding model ahead of time, so workers start without waiting;
with ``MEMORY_EMBEDDER__PATH`` set, check that the directory holds a model the workers can load.

The download (and that check) runs in a child process (``python -m memory_core.engine.embedders.fastembed``):
the CLI stands on the client side and loads no model runtime (an import-linter contract), and the engine
module keeps the one copy of the download-verify-rename and load rules the workers use. The child reports progress as JSON lines,
drawn here as a bar.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.progress import Progress as Bar

from memory_core.cli import EXIT_OK, emit
from memory_core.core.errors import ConfigurationError, EmbedderError, MemoryCoreError
from memory_core.core.settings import embedder_spec, load_settings

PULL_MODULE = "memory_core.engine.embedders.fastembed"


def register(sub: Any) -> None:
    """Adds ``models`` to the ``memory-core`` parser."""
    models = sub.add_parser("models", help="embedding models: fetch one ahead of time").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    p = models.add_parser(
        "pull", help="download a fastembed model into MEMORY_EMBEDDER__CACHE_DIR (once; verified, then moved in)"
    )
    p.add_argument(
        "spec",
        help="fastembed:<name>, e.g. fastembed:BAAI/bge-small-en-v1.5 (as MEMORY_EMBEDDER__MODEL); with "
        "MEMORY_EMBEDDER__PATH set, checks that the directory holds that model instead",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output, no progress bar")
    p.set_defaults(run=_pull)


def _pull(args: argparse.Namespace, rest: list[str]) -> int:
    try:
        data, line = _pulled(args.spec, quiet=args.json)
    except MemoryCoreError as exc:
        if args.json:  # a script reads stdout: the failure is an answer there too (the line on stderr stays)
            print(json.dumps({"spec": args.spec, "error": str(exc)}, indent=2))
        raise
    emit(args, data, lambda: [line])
    return EXIT_OK


def _pulled(typed: str, *, quiet: bool) -> tuple[dict[str, Any], str]:
    """What ``models pull`` did for the spec ``typed``, as data and as a line; raises what went wrong."""
    try:
        spec = embedder_spec(typed)
    except ValueError as exc:
        raise ConfigurationError(f"model spec {typed!r} names no embedder: {exc}") from None
    provider, _, name = spec.partition(":")
    if provider in ("all-MiniLM-L6-v2", "hashing"):
        return {"spec": typed, "source": "shipped"}, f"{typed} ships inside memory-core: nothing to pull"
    if provider == "openai":
        return {"spec": typed, "source": "remote"}, f"{typed} runs on its endpoint: nothing to pull"
    embedder = load_settings().embedder
    if embedder.path is not None:
        return _checked_local(typed, name, embedder.path), (
            f"MEMORY_EMBEDDER__PATH is set: workers load {typed} from {embedder.path}, nothing is downloaded"
        )
    outcome = _run_pull(name, str(embedder.cache_dir), quiet=quiet)
    if "error" in outcome:
        raise EmbedderError(outcome["error"])
    source = "downloaded" if outcome.get("downloaded") else "cache"
    verb = "pulled" if source == "downloaded" else "already in the cache:"
    return {"spec": typed, "source": source, "path": outcome["path"]}, f"{verb} {typed} at {outcome['path']}"


def _checked_local(typed: str, name: str, path: Path) -> dict[str, Any]:
    """Checks that ``path`` holds the model as a worker loads it (its files, loaded, a vector of its length):
    a directory the worker would refuse is refused now, not when the worker starts."""
    if not path.is_dir():
        raise ConfigurationError(f"MEMORY_EMBEDDER__PATH={str(path)!r} is not a directory")
    outcome = _run_pull(name, "--check", str(path), quiet=True)
    if "error" in outcome:
        raise ConfigurationError(
            f"MEMORY_EMBEDDER__PATH={str(path)!r} holds no loadable {typed}: {outcome['error']} (unset "
            "MEMORY_EMBEDDER__PATH to download the model into MEMORY_EMBEDDER__CACHE_DIR instead)"
        )
    return {"spec": typed, "source": "local", "path": str(path)}


def _run_pull(name: str, *where: str, quiet: bool) -> dict[str, Any]:
    """Runs the pull (``where``: the cache directory) or the check (``--check``, the model directory) in a child
    process; returns its last report (``path``, and ``downloaded`` for a pull, or ``error``)."""
    console = Console(file=sys.stderr)
    bar = None
    if not quiet and console.is_terminal:
        bar = Bar(
            TextColumn(f"pull {name}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
            console=console,
        )  # fmt: skip
    last: dict[str, Any] = {"error": "the download stopped without a report"}
    with tempfile.TemporaryFile(mode="w+") as errors:
        command = [sys.executable, "-m", PULL_MODULE, name, *where]
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True) as child:
            assert child.stdout is not None
            task = bar.add_task("pull", total=None) if bar is not None else None
            if bar is not None:
                bar.start()
            try:
                for line in child.stdout:
                    report = _report(line)
                    if bar is not None and task is not None and "done" in report:
                        bar.update(task, completed=report["done"], total=report["total"] or None)
                    elif report:
                        last = report
            finally:
                if bar is not None:
                    bar.stop()
        if child.returncode != 0 and "error" not in last:
            errors.seek(0)
            tail = errors.read().strip().splitlines()[-1:] or [f"exit status {child.returncode}"]
            last = {"error": f"the download failed: {tail[0]}"}
    return last


def _report(line: str) -> dict[str, Any]:
    try:
        report = json.loads(line)
    except ValueError:
        return {}
    return report if isinstance(report, dict) else {}
