"""memory-core: run the stack, look at it, and move its data, from a terminal.

Exit codes (for scripts): 0 done; 1 the operation failed (a worker error, a timeout, nothing
found); 2 bad usage or configuration; 3 Redis or the broker unreachable. Listings print
tables, or JSON with ``--json``; progress goes to stderr, so stdout stays data.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from memory_core.errors import BrokerUnavailable, ConfigurationError, InvalidRequestError, MemoryCoreError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse exits with 2 too; this names the command
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``memory-core`` console script."""
    from memory_core.cli import commands, stack

    parser = _Parser(prog="memory-core", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    stack.register(sub)
    commands.register(sub)
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "passthrough", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    run: Callable[[argparse.Namespace, list[str]], int] = args.run
    try:
        return run(args, rest)
    except (ConfigurationError, InvalidRequestError) as exc:
        print(f"memory-core {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokerUnavailable as exc:
        print(f"memory-core {args.command}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except MemoryCoreError as exc:
        print(f"memory-core {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"memory-core {args.command}: interrupted", file=sys.stderr)
        return 130


def emit(args: argparse.Namespace, data: Any, rows: Callable[[], list[str]]) -> None:
    """Prints ``data`` as JSON with ``--json``, else the lines ``rows`` makes."""
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, default=str))
    else:
        for line in rows():
            print(line)
