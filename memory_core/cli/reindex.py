"""``memory-core reindex``: re-embed the store for another embedder while it serves, then switch to it."""

from __future__ import annotations

import argparse
import json
import shlex
import time
from typing import Any

from memory_core.cli import EXIT_FAILED, EXIT_OK, emit
from memory_core.cli.progress import Progress
from memory_core.client import MemoryClient
from memory_core.client.admin import Admin
from memory_core.core.errors import InvalidRequestError
from memory_core.core.messages import TARGET_FIELDS, ReindexStatus
from memory_core.core.settings import load_settings

POLL = 1.0
"""Seconds between two looks at a followed reindex."""


def register(sub: Any) -> None:
    """Adds ``reindex`` to the ``memory-core`` parser."""
    p = sub.add_parser(
        "reindex",
        help="re-embed the store for another embedder while it serves (blue-green), then switch on restart",
        description="Copies every item into a new collection with vectors of the target embedder, while the "
        "workers keep serving from the old one and mirror each write into both. When it is complete, restart "
        "the workers with MEMORY_EMBEDDER__MODEL set to the target: the first to start switches the store.",
    )
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--to", metavar="SPEC", help="start (or follow) a reindex to this embedder")
    action.add_argument("--status", action="store_true", help="where the reindex stands")
    action.add_argument("--abort", action="store_true", help="stop the reindex and drop the new collection")
    action.add_argument(
        "--drop-old", action="store_true", help="after the switch: drop the collection the store was copied from"
    )
    p.add_argument("--path", help="the target's local model directory (its MEMORY_EMBEDDER__PATH)")
    p.add_argument("--base-url", help="the target's embeddings endpoint (its MEMORY_EMBEDDER__BASE_URL)")
    p.add_argument("--dimensions", type=int, help="the target's vector length (its MEMORY_EMBEDDER__DIMENSIONS)")
    p.add_argument("--roles", help="how the target tells queries from documents (its MEMORY_EMBEDDER__ROLES)")
    p.add_argument("--query-prefix", help="the target's query prefix (its MEMORY_EMBEDDER__QUERY_PREFIX)")
    p.add_argument("--document-prefix", help="the target's document prefix (its MEMORY_EMBEDDER__DOCUMENT_PREFIX)")
    p.add_argument("--query-params", type=_json_object, help="JSON: the target's extra request fields for queries")
    p.add_argument("--document-params", type=_json_object, help="JSON: the target's extra fields for documents")
    p.add_argument("--detach", action="store_true", help="with --to: start it and return at once")
    p.add_argument("--yes", action="store_true", help="really drop a collection (--abort, --drop-old)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=_reindex)


TARGET_OPTIONS = tuple(name for name in TARGET_FIELDS if name != "to")
"""The options that describe a reindex's target besides ``--to``."""


def _json_object(value: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f'expected a JSON object such as \'{{"input_type": "query"}}\', got {value!r}')
    return parsed


def _reindex(args: argparse.Namespace, rest: list[str]) -> int:
    target = {name: getattr(args, name) for name in TARGET_OPTIONS}
    if args.to is None and any(value is not None for value in target.values()):
        raise InvalidRequestError(
            "--path, --base-url, --dimensions, --roles and the prefix and params options describe the target: "
            "use them with --to"
        )
    if args.detach and args.to is None:
        raise InvalidRequestError("--detach goes with --to")
    if (args.abort or args.drop_old) and not args.yes:
        raise InvalidRequestError(f"reindex --{'abort' if args.abort else 'drop-old'} drops a collection: pass --yes")
    with MemoryClient(load_settings()) as client:
        admin = Admin(client)
        if args.to is not None:
            status = admin.reindex("start", to=args.to, **target)
            if not args.detach:
                status = _follow(admin, status, quiet=args.json)
        else:
            status = admin.reindex("abort" if args.abort else "drop_old" if args.drop_old else "status")
    emit(args, status.model_dump(mode="json"), lambda: describe(status))
    return EXIT_FAILED if args.to is not None and not args.detach and status.state != "complete" else EXIT_OK


def _follow(admin: Admin, status: ReindexStatus, *, quiet: bool) -> ReindexStatus:
    """Shows the reindex's progress until it is complete (or aborted); Ctrl-C stops following, not the work."""
    progress = Progress("re-embedded (2 passes)", 2 * status.total, quiet=quiet)
    told = ""
    try:
        while status.state == "building":
            time.sleep(POLL)
            status = admin.reindex("status")  # also resumes parts a killed worker left
            progress.advance(max(0, min(status.scanned, 2 * status.total) - progress.done))
            if status.target_error != told and not quiet:
                told = status.target_error
                print(f"\n{_target_line(status)}" if told else "\nthe target answers again", flush=True)
    except KeyboardInterrupt:
        print("\nstopped following; the reindex goes on (memory-core reindex --status)")
    finally:
        progress.finish()
    return status


def _clock(moment: float | None) -> str:
    return "never" if moment is None else time.strftime("%H:%M:%S", time.localtime(moment))


def _target_line(status: ReindexStatus) -> str:
    return (
        f"target unreachable: {status.target_error}, retrying (since {_clock(status.target_error_since)}; last "
        f"success {_clock(status.last_success_at)}); the live store is not affected"
    )


def describe(status: ReindexStatus) -> list[str]:
    """The status, for people: what is copied to what, how far, and what to do next."""
    if status.state == "none":
        return ["no reindex has been started on this store"]
    reads = f"{status.scanned:,} point reads of about {2 * status.total:,} (2 passes over {status.total:,} points)"
    lines = [
        f"reindex {status.state}: {status.source_collection} -> {status.collection}",
        f"  from {status.source}",
        f"  to   {status.target}",
        f"  {reads}, {status.copied:,} copied, {status.parts_done}/{status.parts} parts done, {status.owed:,} owed",
    ]
    if status.target_error:
        lines.append(f"  {_target_line(status)}")
    restart = " ".join(f"{name}={shlex.quote(value)}" for name, _, value in (s.partition("=") for s in status.restart))
    restart = restart or f"MEMORY_EMBEDDER__MODEL={status.target_spec}"
    next_step = {
        "building": "follow it with `memory-core reindex --status`; stop it with `memory-core reindex --abort --yes`",
        "complete": f"restart every worker with {restart} (and the target's API key in MEMORY_EMBEDDER__API_KEY if "
        "it needs one); the first to start catches up what is still owed and switches the store; writes reach "
        "both collections until then",
        "switched": "the workers run the new embedder; `memory-core reindex --drop-old --yes` frees the old collection"
        if not status.source_dropped
        else "the workers run the new embedder; the old collection is dropped",
        "aborted": "the store goes on with its embedder; the new collection is dropped",
    }
    lines.append(f"  next: {next_step[status.state]}")
    return lines
