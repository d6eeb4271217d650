"""Prometheus metrics: what a worker (or an app process) did, scraped from ``MEMORY_METRICS__PORT``.

Every series is labelled with low-cardinality values only (task names, tiers, outcomes, models).
Items per namespace is the one per-tenant series: the ``top_namespaces`` largest only, the rest
summed under ``namespace="(other)"``, computed at scrape time from the store and cached briefly.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, Counter, Histogram, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from memory_core.core.hosts import is_loopback, matches, own_hosts
from memory_core.core.validation import short_repr

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

logger = logging.getLogger(__name__)

_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

TASKS = Counter("memory_core_tasks", "Tasks by name and final state (success, failure, retry).", ["task", "state"])
TASK_SECONDS = Histogram("memory_core_task_seconds", "Run time of a task in the worker.", ["task"], buckets=_LATENCY)
EMBED_SECONDS = Histogram("memory_core_embed_seconds", "Time of one embedder call.", buckets=_LATENCY)
EMBEDDED_TEXTS = Counter("memory_core_embedded_texts", "Texts embedded (cache misses only).")
RERANK_SECONDS = Histogram(
    "memory_core_rerank_seconds", "Time of one reranker call (the candidates of one search).", buckets=_LATENCY
)
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
FORMATIONS = Counter("memory_core_formations", "Formation operations by outcome.", ["outcome"])
# Per namespace in the usage ledger (``memory-core usage``), not here: namespaces are unbounded label values.
FORMATION_TOKENS = Counter(
    "memory_core_formation_tokens", "Formation model tokens by model and direction.", ["model", "direction"]
)
MODEL_TOKENS = Counter("memory_core_model_tokens", "Summarizer tokens by model and direction.", ["model", "direction"])
REINDEX_POINTS = Counter(
    "memory_core_reindex_points",
    "Points a reindex read (scanned) and wrote into its new collection (copied).",
    ["kind"],
)
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


_served: dict[int, WSGIServer] = {}
_serve_lock = threading.Lock()


def serve(address: str, port: int) -> int:
    """Serves the default registry on ``address:port`` (once per port per process); returns the port.

    Port 0 picks a free one. A port already taken by another process is logged, not fatal: metrics
    must never keep a worker from starting. On a loopback address the endpoint answers only requests
    naming a loopback address and its port in ``Host`` (else 421): it has no auth, and a web page that
    rebinds its own DNS name to 127.0.0.1 must not read namespace names from it. On any other address
    (a compose network, where Prometheus scrapes by service name) it answers every ``Host``.
    """
    with _serve_lock:
        if port and port in _served:
            return port
        app: WSGIApplication = make_wsgi_app(REGISTRY)
        try:
            server = _listen(address, port, app)
        except OSError as exc:
            logger.warning("metrics not served: cannot listen on %s:%d (%s)", address, port, exc)
            return 0
        bound = int(server.server_port)
        if is_loopback(address):
            server.set_app(_own_host_only(app, own_hosts(address, bound)))
        threading.Thread(target=server.serve_forever, name=f"metrics-{bound}", daemon=True).start()
        _served[bound] = server
        logger.info("metrics on http://%s:%d/metrics", address, bound)
        return bound


class _QuietHandler(WSGIRequestHandler):
    # ``format`` is the base class's parameter name, kept so the override matches its signature.
    def log_message(self, format: str, *args: Any) -> None:
        """Logs nothing: a scrape every few seconds is not news."""


def _listen(address: str, port: int, app: WSGIApplication) -> WSGIServer:
    # prometheus_client's start_http_server, with a WSGI app of our own: the server picks IPv4 or IPv6 by
    # the address, as the library does, and threads per request.
    family, *_, sockaddr = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    server_class = type("_MetricsServer", (ThreadingWSGIServer,), {"address_family": family})
    return make_server(str(sockaddr[0]), port, app, server_class, handler_class=_QuietHandler)


def _own_host_only(app: WSGIApplication, allowed: list[str]) -> WSGIApplication:
    def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        host = str(environ.get("HTTP_HOST", ""))
        if matches(host.lower(), allowed):
            return app(environ, start_response)
        body = (
            f"host {short_repr(host)} is not this endpoint's; it answers {', '.join(allowed)} only "
            "(a page that rebinds its DNS name to this machine is refused)\n"
        ).encode()
        start_response(
            "421 Misdirected Request",
            [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))],
        )
        return [body]

    return guarded
