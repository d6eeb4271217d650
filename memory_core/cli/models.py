"""``memory-core models pull <spec>``: fetch an embedding model ahead of time, so workers start without waiting.

The download itself runs in a child process (``python -m memory_core.engine.embedders.fastembed``): the CLI
stands on the client side and loads no model runtime (an import-linter contract), and the engine module keeps
the one copy of the download-verify-rename rule the workers use. The child reports progress as JSON lines,
drawn here as a bar.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.progress import Progress as Bar

from memory_core.cli import EXIT_FAILED, EXIT_OK, emit
from memory_core.core.errors import ConfigurationError
from memory_core.core.settings import load_settings

PULL_MODULE = "memory_core.engine.embedders.fastembed"


def register(sub: Any) -> None:
    """Adds ``models`` to the ``memory-core`` parser."""
    models = sub.add_parser("models", help="embedding models: fetch one ahead of time").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    p = models.add_parser(
        "pull", help="download a fastembed model into MEMORY_EMBEDDER__CACHE_DIR (once; verified, then moved in)"
    )
    p.add_argument("spec", help="fastembed:<name>, e.g. fastembed:BAAI/bge-small-en-v1.5 (as MEMORY_EMBEDDER__MODEL)")
    p.add_argument("--json", action="store_true", help="machine-readable output, no progress bar")
    p.set_defaults(run=_pull)


def _pull(args: argparse.Namespace, rest: list[str]) -> int:
    spec: str = args.spec
    provider, _, name = spec.partition(":")
    if spec in ("all-MiniLM-L6-v2", "hashing"):
        return _done(args, {"spec": spec, "source": "shipped"}, f"{spec} ships inside memory-core: nothing to pull")
    if provider == "openai" and name:
        return _done(args, {"spec": spec, "source": "remote"}, f"{spec} runs on its endpoint: nothing to pull")
    if provider != "fastembed" or not name:
        raise ConfigurationError(
            f"model spec {spec!r} names no model to pull; expected fastembed:<name>, e.g. fastembed:BAAI/bge-small-en-v1.5"
        )
    embedder = load_settings().embedder
    if embedder.path is not None:
        if not embedder.path.is_dir():
            raise ConfigurationError(f"MEMORY_EMBEDDER__PATH={str(embedder.path)!r} is not a directory")
        return _done(
            args,
            {"spec": spec, "source": "local", "path": str(embedder.path)},
            f"MEMORY_EMBEDDER__PATH is set: workers load {spec} from {embedder.path}, nothing is downloaded",
        )
    outcome = _run_pull(name, str(embedder.cache_dir), quiet=args.json)
    if "error" in outcome:
        print(f"memory-core models pull: {outcome['error']}", file=sys.stderr)
        return EXIT_FAILED
    source = "downloaded" if outcome.get("downloaded") else "cache"
    verb = "pulled" if source == "downloaded" else "already in the cache:"
    return _done(args, {"spec": spec, "source": source, "path": outcome["path"]}, f"{verb} {spec} at {outcome['path']}")


def _done(args: argparse.Namespace, data: dict[str, Any], line: str) -> int:
    emit(args, data, lambda: [line])
    return EXIT_OK


def _run_pull(name: str, cache_dir: str, *, quiet: bool) -> dict[str, Any]:
    """Runs the pull in a child process; returns its last report (``path`` and ``downloaded``, or ``error``)."""
    console = Console(file=sys.stderr)
    bar = None
    if not quiet and console.is_terminal:
        bar = Bar(
            TextColumn(f"pull {name}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
            console=console,
        )  # fmt: skip
    last: dict[str, Any] = {"error": "the download stopped without a report"}
    with tempfile.TemporaryFile(mode="w+") as errors:
        command = [sys.executable, "-m", PULL_MODULE, name, cache_dir]
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
