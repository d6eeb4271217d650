"""memory-core: run the stack, look at it, and move its data, from a terminal.

Exit codes (for scripts): 0 done; 1 the operation failed (a worker error, a timeout, nothing
found); 2 bad usage or configuration; 3 Redis or the broker unreachable. Listings print
tables, or JSON with ``--json``; progress goes to stderr, so stdout stays data.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import textwrap
import typing
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import redis
from pydantic import BaseModel, ValidationError
from pydantic_settings import SettingsError

from memory_core.core.errors import BrokerUnavailable, ConfigurationError, InvalidRequestError, MemoryCoreError
from memory_core.core.models import describe
from memory_core.core.settings import Settings

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse exits with 2 too; this names the command
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``memory-core`` parser; its help lists every command, down to each action (``sets create``)."""
    from memory_core.cli import commands, stack

    parser = _Parser(
        prog="memory-core",
        usage="%(prog)s [-h] [--version] COMMAND ...",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"memory-core {_version()}")
    # Listed by the epilog below instead: argparse's own list names only the first word of each command.
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND ...",
        prog="memory-core",
        parser_class=_Parser,
        help=argparse.SUPPRESS,
    )
    stack.register(sub)
    commands.register(sub)
    parser.epilog = "commands:\n" + "\n".join(_listed(command_helps(parser)))
    return parser


def command_helps(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, str]:
    """Every command ``parser`` runs, as its words (``sets create``), with its help, in the order registered."""
    found: dict[str, str] = {}
    for action in parser._actions:  # argparse keeps subcommands only there
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, child in action.choices.items():
            words = f"{prefix}{name}"
            deeper = command_helps(child, words + " ")
            found.update(deeper or {words: helps.get(name, "")})
    return found


def _listed(helps: dict[str, str], width: int = 100) -> list[str]:
    column = max(len(words) for words in helps) + 4
    lines = []
    for words, text in helps.items():
        wrapped = textwrap.wrap(text, width - column) or [""]
        lines.append(f"  {words:<{column - 2}}{wrapped[0]}")
        lines.extend(" " * column + more for more in wrapped[1:])
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``memory-core`` console script."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "passthrough", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    run: Callable[[argparse.Namespace, list[str]], int] = args.run
    try:
        return run(args, rest)
    except BrokenPipeError:
        # The reader went away (`export acme | head`): stop quietly. stdout is pointed at /dev/null so the
        # interpreter's own flush at exit does not fail on the closed pipe as well.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        print(f"memory-core {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001  # every failure becomes one line and an exit code, never a traceback
        code, message = _explained(exc)
        print(f"memory-core {args.command}: {message}", file=sys.stderr)
        return code


def _explained(exc: Exception) -> tuple[int, str]:
    """The exit code and the one line a failure is reported by."""
    if isinstance(exc, ConfigurationError | InvalidRequestError):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, SettingsError):  # raised by pydantic-settings before any validation: load_settings lets it by
        return EXIT_USAGE, _unparsed_setting(exc)
    if isinstance(exc, ValidationError):  # an argument that fails a request's validation
        return EXIT_USAGE, describe(exc, "argument")
    if isinstance(exc, BrokerUnavailable):
        return EXIT_UNREACHABLE, str(exc)
    if isinstance(exc, redis.RedisError):
        return EXIT_UNREACHABLE, f"Redis does not answer ({type(exc).__name__}: {exc}); check MEMORY_REDIS__URL"
    if isinstance(exc, MemoryCoreError):
        return EXIT_FAILED, f"{type(exc).__name__}: {exc}"
    if isinstance(exc, FileNotFoundError | IsADirectoryError | NotADirectoryError | PermissionError):
        return EXIT_USAGE, f"{exc.filename}: {exc.strerror}"
    if isinstance(exc, OSError):
        return EXIT_FAILED, f"{exc.filename or 'I/O'}: {exc.strerror or exc}"
    raise exc  # a bug of ours: the traceback is what a report needs


def _unparsed_setting(exc: SettingsError) -> str:
    """The line for a list or object setting whose value is not JSON; pydantic-settings names only its group."""
    found = re.search(r'field "(\w+)"', str(exc))
    group = found.group(1) if found else ""
    named = [name for name in _json_settings(group) if name in os.environ and not _is_json(os.environ[name])]
    what = " and ".join(named) or f"a MEMORY_{group.upper()}__* setting"
    return (
        f"invalid settings: {what} is not JSON ({exc.__cause__ or exc}); a setting that holds a list or an object "
        """takes JSON, e.g. MEMORY_REDACTION__KINDS='["email", "phone"]'"""
    )


def _json_settings(group: str) -> list[str]:
    """The variables of a settings group that pydantic-settings reads as JSON: the group as a whole, and each of
    its fields that holds a list, a mapping or a model."""
    field = Settings.model_fields.get(group)
    model = field.annotation if field is not None else None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return []
    variable = f"MEMORY_{group.upper()}"
    composite = [
        f"{variable}__{name.upper()}"
        for name, inner in model.model_fields.items()
        if typing.get_origin(inner.annotation) in (list, dict, set, tuple)
        or (isinstance(inner.annotation, type) and issubclass(inner.annotation, BaseModel))
    ]
    return [variable, *composite]


def _is_json(value: str) -> bool:
    try:
        json.loads(value)
    except ValueError:
        return False
    return True


def _version() -> str:
    try:
        return version("memory-core")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def emit(args: argparse.Namespace, data: Any, rows: Callable[[], list[str]]) -> None:
    """Prints ``data`` as JSON with ``--json``, else the lines ``rows`` makes."""
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, default=str))
    else:
        for line in rows():
            print(line)
