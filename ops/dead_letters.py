"""List, replay or drop dead letters (write tasks that failed for good, kept with their payload).

    ops/dead-letters list [--namespace NS] [--json]
    ops/dead-letters replay --namespace NS
    ops/dead-letters drop --namespace NS

Exit codes: 0 done, 1 nothing to do (no letters), 2 bad usage, 3 Redis unreachable.
"""

from __future__ import annotations

import argparse
import json
import sys

from memory_core import BrokerUnavailable, MemoryClient, load_settings
from memory_core.deadletters import DeadLetters


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ops/dead-letters", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("action", choices=["list", "replay", "drop"])
    parser.add_argument("--namespace", help="one namespace (required for replay and drop)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    if args.action != "list" and not args.namespace:
        parser.error(f"{args.action} needs --namespace")
    try:
        with MemoryClient(load_settings()) as client:
            letters = DeadLetters(client.dispatcher_redis, client.keys, client.dispatcher)
            namespaces = [args.namespace] if args.namespace else letters.namespaces()
            if args.action == "list":
                found = [letter for ns in namespaces for letter in letters.entries(ns)]
                if args.json:
                    print(json.dumps([letter.model_dump(by_alias=True) for letter in found], indent=2))
                for letter in [] if args.json else found:
                    print(f"{letter.failed_at}  {letter.namespace}  {letter.task}  {letter.task_id}  "
                          f"{letter.error.get('type')}: {letter.error.get('message')}")  # fmt: skip
                return 0 if found else 1
            if args.action == "replay":
                sent = letters.replay(args.namespace)
                print(json.dumps({"replayed": len(sent), "task_ids": sent}) if args.json else f"replayed {len(sent)}")
                return 0 if sent else 1
            dropped = letters.drop(args.namespace)
            print(json.dumps({"dropped": dropped}) if args.json else f"dropped {dropped}")
            return 0 if dropped else 1
    except BrokerUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
