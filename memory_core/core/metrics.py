"""Prometheus metrics: what a worker (or an app process) did, scraped from ``MEMORY_METRICS__PORT``.

Every series is labelled with low-cardinality values only (task names, tiers, outcomes, models).
Items per namespace is the one per-tenant series: the ``top_namespaces`` largest only, the rest
summed under ``namespace="(other)"``, computed at scrape time from the store and cached briefly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import REGISTRY, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)

_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

TASKS = Counter("memory_core_tasks", "Tasks by name and final state (success, failure, retry).", ["task", "state"])
TASK_SECONDS = Histogram("memory_core_task_seconds", "Run time of a task in the worker.", ["task"], buckets=_LATENCY)
EMBED_SECONDS = Histogram("memory_core_embed_seconds", "Time of one embedder call.", buckets=_LATENCY)
EMBEDDED_TEXTS = Counter("memory_core_embedded_texts", "Texts embedded (cache misses only).")
STORE_SECONDS = Histogram(
    "memory_core_store_seconds", "Time of one vector-store call, by operation.", ["operation"], buckets=_LATENCY
)
BATCH_ITEMS = Histogram(
    "memory_core_batch_items",
    "Items per micro-batch of writes (one embedder call).",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
)
CACHE = Counter("memory_core_cache_requests", "Cache lookups by tier and result.", ["tier", "result"])
COMPACTIONS = Counter("memory_core_compactions", "Compactions by outcome.", ["outcome"])
COMPACTION_ITEMS = Counter("memory_core_compaction_items_folded", "Items folded into summaries.")
QUEUE_WAIT_SECONDS = Histogram(
    "memory_core_queue_wait_seconds",
    "How long a task waited in its queue, from its publishing to a worker starting it (clients' and workers'"
    " clocks: keep them in sync).",
    ["queue"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800),
)
QUOTA_REFUSALS = Counter(
    "memory_core_quota_refusals", "Adds refused because a namespace was at a quota, by quota.", ["quota"]
)
QUOTA_RECOUNT_SECONDS = Histogram(
    "memory_core_quota_recount_seconds", "Time to measure one namespace's usage for its quotas.", buckets=_LATENCY
)
MODEL_TOKENS = Counter("memory_core_model_tokens", "Summarizer tokens by model and direction.", ["model", "direction"])
DEAD_LETTERS = Counter("memory_core_dead_letters", "Tasks that failed for good and were dead-lettered.", ["task"])


@contextmanager
def timed(histogram: Histogram, **labels: str) -> Iterator[None]:
    """Observes the block's wall time in ``histogram`` (with ``labels``), also when it raises."""
    started = time.perf_counter()
    try:
        yield
    finally:
        (histogram.labels(**labels) if labels else histogram).observe(time.perf_counter() - started)


class NamespaceItems(Collector):
    """``memory_core_items{namespace}``: items of the largest namespaces, the rest as ``(other)``."""

    def __init__(self, counts: Callable[[], dict[str, int]], *, top: int, max_age: float = 30.0) -> None:
        self._counts = counts
        self._top = top
        self._max_age = max_age
        self._lock = threading.Lock()
        self._cached: tuple[float, dict[str, int]] | None = None

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Registration calls this instead of collect(), which would open the store and cache an early answer.
        yield self._family()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self._family()
        for namespace, count in self._snapshot().items():
            family.add_metric([namespace], count)
        yield family

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "memory_core_items", "Items stored, by namespace (largest only).", labels=["namespace"]
        )

    def _snapshot(self) -> dict[str, int]:
        with self._lock:
            if self._cached is None or time.monotonic() - self._cached[0] > self._max_age:
                try:
                    self._cached = (time.monotonic(), self._ranked(self._counts()))
                except Exception:  # a scrape must not fail because the store is busy or down
                    logger.warning("could not count items per namespace for metrics", exc_info=True)
                    return self._cached[1] if self._cached else {}
            return self._cached[1]

    def _ranked(self, counts: dict[str, int]) -> dict[str, int]:
        ranked = sorted(counts.items(), key=lambda pair: (-pair[1], pair[0]))
        shown = dict(ranked[: self._top])
        rest = sum(count for _, count in ranked[self._top :])
        if rest or len(ranked) > self._top:
            shown["(other)"] = rest
        return shown


_served: dict[int, Any] = {}
_serve_lock = threading.Lock()


def serve(address: str, port: int) -> int:
    """Serves the default registry on ``address:port`` (once per port per process); returns the port.

    Port 0 picks a free one. A port already taken by another process is logged, not fatal: metrics
    must never keep a worker from starting.
    """
    with _serve_lock:
        if port and port in _served:
            return port
        try:
            server, _thread = start_http_server(port, addr=address, registry=REGISTRY)
        except OSError as exc:
            logger.warning("metrics not served: cannot listen on %s:%d (%s)", address, port, exc)
            return 0
        bound = int(server.server_port)
        _served[bound] = server
        logger.info("metrics on http://%s:%d/metrics", address, bound)
        return bound
