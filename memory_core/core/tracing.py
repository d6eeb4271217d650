"""Optional OpenTelemetry tracing: client -> broker -> worker -> store -> summarizer as one trace.

Spans are made through the OpenTelemetry API, which does nothing until a tracer provider is
installed: by ``configure`` when ``MEMORY_TRACING__ENABLED`` is true (exporting over OTLP/HTTP to
``MEMORY_TRACING__ENDPOINT``, and only there), or by the host app's own set-up. The trace context
travels inside each task message as W3C ``traceparent``/``tracestate`` headers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context, propagate, trace

from memory_core.core.errors import ConfigurationError
from memory_core.core.settings import TracingSettings

logger = logging.getLogger(__name__)

tracer = trace.get_tracer("memory_core")

HEADERS = ("traceparent", "tracestate")
"""The message headers that carry the trace context (W3C Trace Context)."""

_configured = threading.Lock()
_done = False


def configure(settings: TracingSettings) -> bool:
    """Installs an SDK tracer provider when tracing is enabled (once per process); True if it did."""
    global _done
    if not settings.enabled:
        return False
    with _configured:
        if _done:
            return False
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            raise ConfigurationError(
                "MEMORY_TRACING__ENABLED=true needs the OpenTelemetry SDK: pip install 'memory-core[tracing]'"
            ) from exc
        provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}))
        if settings.endpoint:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.endpoint)))
        else:
            logger.warning("tracing is enabled without MEMORY_TRACING__ENDPOINT: spans are recorded, not exported")
        trace.set_tracer_provider(provider)
        _done = True
        return True


def installed() -> bool:
    """Whether a tracer provider is installed (by ``configure`` or the host app).

    Until one is, the API's spans record nothing, yet making them, extracting parents and
    attaching contexts took ~8% of a worker's GIL-held time on one-item adds (py-spy --gil):
    without a provider, the helpers below skip it all.
    """
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def inject(headers: MutableMapping[str, Any]) -> None:
    """Writes the current trace context into a message's headers (nothing when no span is recording)."""
    if installed():
        propagate.inject(headers)


@contextmanager
def consumer_span(name: str, headers: Mapping[str, Any], **attributes: Any) -> Iterator[None]:
    """A span for a task run in a worker, child of the span that published it (from its headers)."""
    if not installed():
        yield
        return
    carrier = {h: headers[h] for h in HEADERS if isinstance(headers.get(h), str)}
    parent = propagate.extract(carrier)
    with tracer.start_as_current_span(name, context=parent, kind=trace.SpanKind.CONSUMER, attributes=attributes):
        yield


def current() -> context.Context:
    """The current context, to continue a trace in another thread (the write batcher's)."""
    return context.get_current()


@contextmanager
def span_in(ctx: context.Context | None, name: str, **attributes: Any) -> Iterator[None]:
    """A span that is a child of ``ctx`` (captured in another thread), or of the current span."""
    if not installed():
        yield
        return
    with tracer.start_as_current_span(name, context=ctx, attributes=attributes):
        yield


@contextmanager
def attached(ctx: context.Context) -> Iterator[None]:
    """Runs the block in ``ctx`` (captured in another thread), without a span of its own."""
    token = context.attach(ctx)
    try:
        yield
    finally:
        context.detach(token)


@contextmanager
def producer_span(name: str) -> Iterator[None]:
    """A span for publishing a task (its context goes into the message)."""
    if not installed():
        yield
        return
    with tracer.start_as_current_span(name, kind=trace.SpanKind.PRODUCER):
        yield
