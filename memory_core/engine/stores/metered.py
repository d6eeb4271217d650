"""Times and traces every store call (``memory_core_store_seconds{operation}``, a ``store.<operation>`` span)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

from memory_core.core.metrics import STORE_SECONDS
from memory_core.core.tracing import tracer
from memory_core.engine.stores.base import VectorStore


class MeteredStore:
    """Delegates to ``inner``, observing each call's wall time and wrapping it in a span."""

    def __init__(self, inner: VectorStore) -> None:
        self._inner = inner

    @property
    def location(self) -> str:
        return self._inner.location

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not callable(target) or name.startswith("_"):
            return target
        histogram = STORE_SECONDS.labels(name)
        call = cast(Callable[..., Any], target)

        def metered(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                with tracer.start_as_current_span(f"store.{name}"):
                    return call(*args, **kwargs)
            finally:
                histogram.observe(time.perf_counter() - started)

        return metered


def metered(store: VectorStore) -> VectorStore:
    """``store``, timed and traced."""
    return cast(VectorStore, MeteredStore(store))
