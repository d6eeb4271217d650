"""One process owns an embedded store directory, and says who it is.

The engine locks its write-ahead log too, but only after a worker has started, and its refusal
("Can't init WAL: WouldBlock") names neither the path nor the holder. This lock is taken first, when
the store is opened: a second opener fails at once with the path and the owner's pid, host and
command. It is an ``flock``, so the kernel releases it when the owner exits, however it exits.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from memory_core.core.errors import ConfigurationError

OWNER_FILE = ".owner"


def _unusable(path: Path, exc: OSError) -> ConfigurationError:
    return ConfigurationError(
        f"cannot open the embedded store at {path}: {exc.strerror or exc}; "
        "set MEMORY_QDRANT__PATH to a directory this process can create and write"
    )


_SECOND_OWNER = (
    "one process owns an embedded store: stop that one, point MEMORY_QDRANT__PATH elsewhere, or run several "
    "workers on a Qdrant server (MEMORY_QDRANT__BACKEND=server)"
)


class StoreOwner:
    """Holds the exclusive lock on ``path``; raises ``ConfigurationError`` naming the holder if taken."""

    def __init__(self, path: Path, *, if_taken: str = _SECOND_OWNER) -> None:
        self.path = path.resolve()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._fd: int | None = os.open(self.path / OWNER_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise _unusable(self.path, exc) from exc
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._read()
            os.close(self._fd)
            self._fd = None
            raise ConfigurationError(f"the embedded store at {self.path} is in use by {holder}; {if_taken}") from None
        me = {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv[:4])}
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps({**me, "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode(), 0)

    def _read(self) -> str:
        try:
            owner = json.loads(os.pread(self._fd or -1, 4096, 0) or b"{}")
        except (OSError, ValueError):
            return "another process"
        if not owner:
            return "another process"
        return f"pid {owner.get('pid')} on {owner.get('host')} ({owner.get('command')}, since {owner.get('since')})"

    def release(self) -> None:
        """Frees the lock (closing the file releases it); the owner file stays, as a record."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
