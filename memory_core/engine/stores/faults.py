"""A fault-injection wrapper for fault tests: while a flag file exists, every store call fails transiently.

Off unless ``MEMORY_QDRANT__FAULT_FLAG`` names a file. It lets a test make the store
"unavailable for a while" in a worker it runs as a separate process, then bring it back,
without touching the engine's files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from memory_core.core.errors import TransientStoreError
from memory_core.engine.stores.base import VectorStore


class FaultInjectingStore:
    """Delegates to ``inner``; raises ``TransientStoreError`` from every call while ``flag`` exists."""

    def __init__(self, inner: VectorStore, flag: Path) -> None:
        self._inner = inner
        self._flag = flag

    @property
    def location(self) -> str:
        return self._inner.location

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not callable(target) or name == "close":
            return target

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if self._flag.exists():
                raise TransientStoreError(f"store unavailable: fault injected while {self._flag} exists")
            return cast(Callable[..., Any], target)(*args, **kwargs)

        return guarded


def with_faults(store: VectorStore, flag: Path | None) -> VectorStore:
    """``store``, wrapped when a fault flag is configured."""
    return store if flag is None else cast(VectorStore, FaultInjectingStore(store, flag))
