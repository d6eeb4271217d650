"""OpenTelemetry: one add is one connected trace, client -> broker -> worker -> store, and on to the summarizer.

The SDK's in-memory exporter collects the spans of this process: the client and the
session's in-thread worker both run here. Without a tracer provider (the default) no span
records and nothing is added to messages.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memory_core import CompactionConfig, MemoryClient

from .waiting import wait_for

EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans(worker: object) -> Iterator[InMemorySpanExporter]:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


def _connected(found: list[ReadableSpan], root: ReadableSpan) -> set[str]:
    """Names of the spans that descend from ``root`` through parent links."""
    ids = {root.context.span_id}
    names = {root.name}
    changed = True
    while changed:
        changed = False
        for span in found:
            if span.parent is not None and span.parent.span_id in ids and span.context.span_id not in ids:
                ids.add(span.context.span_id)
                names.add(span.name)
                changed = True
    return names


def test_one_add_is_one_connected_trace_from_client_to_store(
    spans: InMemorySpanExporter, client: MemoryClient, namespace: str
):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes", capacity=100)
    spans.clear()
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("app request") as root:
        notes.add(["Alice prefers green tea"], ids=["tea"])
    trace_id = root.get_span_context().trace_id
    wait_for(
        lambda: any(s.name == "store.upsert" and s.context.trace_id == trace_id for s in spans.get_finished_spans()),
        60,
    )
    mine = [s for s in spans.get_finished_spans() if s.context.trace_id == trace_id]
    names = _connected(mine, next(s for s in mine if s.name == "app request"))
    assert {"publish memory.add", "memory.add", "add.batch", "embed", "store.upsert"} <= names
    consumer = next(s for s in mine if s.name == "memory.add")
    assert consumer.kind == trace.SpanKind.CONSUMER
    assert consumer.parent is not None
    assert consumer.parent.span_id == next(s for s in mine if s.name == "publish memory.add").context.span_id


def test_a_compaction_an_add_triggers_continues_its_trace_into_the_summarizer(
    spans: InMemorySpanExporter, client: MemoryClient, namespace: str
):
    notes = client.long_term(namespace, "u").get_or_create_memory_set(
        "notes", capacity=4, compaction_config=CompactionConfig(limit=1)
    )
    notes.add([f"fact {i}" for i in range(3)])
    spans.clear()
    with trace.get_tracer("test").start_as_current_span("app request") as root:
        notes.add(["the fact that fills the set"])
    trace_id = root.get_span_context().trace_id
    wanted = {"memory.add", "publish memory.compact", "memory.compact", "summarize"}

    def names_in_this_trace() -> set[str]:
        mine = [s for s in spans.get_finished_spans() if s.context.trace_id == trace_id]
        return _connected(mine, next(s for s in mine if s.name == "app request"))

    # Wait on this trace's spans, not on any "summarize": a compaction an earlier test left
    # on the shared worker may finish after spans.clear() and would end a wait on any span.
    wait_for(lambda: wanted <= names_in_this_trace(), 60)
    assert wanted <= names_in_this_trace()


def test_without_a_recording_span_no_trace_header_is_sent(client: MemoryClient, namespace: str):
    from memory_core.core import tracing

    headers: dict[str, str] = {}
    tracing.inject(headers)
    assert headers == {}
