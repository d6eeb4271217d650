"""``memory-core formation``: an operation's report, and what formation kept for later (deferred, verbatim)."""

from __future__ import annotations

import argparse
from typing import Any

from memory_core.cli import EXIT_OK, emit
from memory_core.client import MemoryClient
from memory_core.client.admin import Admin
from memory_core.core.messages import FormationAdminReport, FormationReport
from memory_core.core.settings import load_settings

TEXT_WIDTH = 80
"""Characters of a fact's text a status line shows; ``--json`` has it whole."""


def register(sub: Any) -> None:
    """Adds ``formation status``, ``formation resume`` and ``formation replay`` to the ``memory-core`` parser."""
    actions = sub.add_parser(
        "formation", help="formation operations: their reports, deferred ones, facts kept verbatim"
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser("status", help="one operation's report: status, model, decisions, notes, tokens")
    p.add_argument("--namespace", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("op_id", metavar="OP_ID", help="the operation id (remember's receipt.op_id)")
    _json(p).set_defaults(run=_status)
    p = actions.add_parser(
        "resume",
        help="send a namespace's deferred operations again (over its daily tokens they defer again)",
    )
    p.add_argument("--namespace", required=True)
    _json(p).set_defaults(run=_resume)
    p = actions.add_parser(
        "replay", help="form again with the model the facts a set kept verbatim (workers need an API key)"
    )
    p.add_argument("--namespace", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--set", default="facts", help="the memory set (default: facts)")
    _json(p).set_defaults(run=_replay)


def _json(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def _status(args: argparse.Namespace, rest: list[str]) -> int:
    with MemoryClient(load_settings()) as client:
        report = client.long_term(args.namespace, args.key).operation(args.op_id)
    emit(args, report.model_dump(mode="json"), lambda: describe(report))
    return EXIT_OK


def _resume(args: argparse.Namespace, rest: list[str]) -> int:
    with MemoryClient(load_settings()) as client:
        report = Admin(client).formation_resume(args.namespace)
    emit(
        args,
        report.model_dump(mode="json"),
        lambda: [f"sent {report.sent} deferred operations of {args.namespace}, {report.left} left", *report.notes],
    )
    return EXIT_OK


def _replay(args: argparse.Namespace, rest: list[str]) -> int:
    with MemoryClient(load_settings()) as client:
        report = Admin(client).formation_replay(args.namespace, args.key, args.set)
    emit(args, report.model_dump(mode="json"), lambda: _replayed(args, report))
    return EXIT_OK


def _replayed(args: argparse.Namespace, report: FormationAdminReport) -> list[str]:
    where = f"{args.namespace}/{args.key}/{args.set}"
    lines = [f"sent {report.sent} formation operations to form the verbatim facts of {where} again", *report.notes]
    if report.sent:
        lines.append("each verbatim fact is superseded by what the model forms of it once its operation is done")
    return lines


def describe(report: FormationReport) -> list[str]:
    """The report, for people: where it stands, then one line per decision, its notes and what it cost."""
    by = f", formed by {report.formed_by}" if report.formed_by else ""
    lines = [
        f"operation {report.op_id}: {report.status}{by}",
        f"  set {report.namespace}/{report.key}/{report.set_name}, updated {report.updated_at:%Y-%m-%d %H:%M:%S %Z}",
    ]
    if report.error:
        lines.append(f"  error: {report.error}")
    if report.decisions:
        lines.append(f"  decisions ({len(report.decisions)}):")
    for decision in report.decisions:
        lines.append(f"    {decision.decision:<10} {decision.fact_id}  {_cut(decision.text)}")
        if decision.target:
            lines.append(f"      supersedes {decision.target}")
        if decision.note:
            lines.append(f"      note: {decision.note}")
    lines.extend(f"  note: {note}" for note in report.notes)
    lines.append(
        f"  tokens: {report.input_tokens:,} in, {report.output_tokens:,} out ({report.model_calls} model calls)"
    )
    return lines


def _cut(text: str) -> str:
    flat = " ".join(text.split())  # a fact on one line: the next decision starts on the next
    return flat if len(flat) <= TEXT_WIDTH else flat[: TEXT_WIDTH - 1] + "…"
