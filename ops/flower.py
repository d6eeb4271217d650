"""Start Flower, the Celery dashboard, the safe way: basic auth required, loopback by default.

    ops/flower            needs MEMORY_FLOWER__BASIC_AUTH=user:password (several: comma-separated)
    ops/flower --dev      no auth, and only on 127.0.0.1, whatever MEMORY_FLOWER__ADDRESS says

The credentials reach Flower through its environment (FLOWER_BASIC_AUTH), never its command line,
so they do not show in ``ps``. Exit codes: 0 Flower stopped, 2 refused (no auth, bad settings).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from memory_core import ConfigurationError, load_settings

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ops/flower", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--dev", action="store_true", help="no authentication, loopback only")
    args, flower_args = parser.parse_known_args(argv)
    try:
        settings = load_settings().flower
    except ConfigurationError as exc:
        print(f"ops/flower: {exc}", file=sys.stderr)
        return 2
    env = {k: v for k, v in os.environ.items() if k != "FLOWER_BASIC_AUTH"}
    address = settings.address
    if args.dev:
        address = "127.0.0.1"
        print("ops/flower: dev mode: no authentication, listening on 127.0.0.1 only", file=sys.stderr)
    elif settings.basic_auth is None:
        print(
            "ops/flower: refusing to start Flower without authentication: set "
            "MEMORY_FLOWER__BASIC_AUTH=user:password, or pass --dev for a loopback-only dashboard without it",
            file=sys.stderr,
        )
        return 2
    else:
        env["FLOWER_BASIC_AUTH"] = settings.basic_auth.get_secret_value()
    celery = str(Path(sys.executable).parent / "celery")
    command = [celery, "-A", "workers.app", "flower", f"--address={address}", f"--port={settings.port}", *flower_args]
    os.chdir(ROOT)
    os.execve(celery, command, env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
