import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from memory_core.core import tracing


def test_without_a_tracer_provider_no_span_is_made_and_nothing_is_injected(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    monkeypatch.setattr(tracing.tracer, "start_as_current_span", None)  # would raise if called
    assert not tracing.installed()
    headers: dict[str, str] = {}
    ran = []
    with tracing.producer_span("memory.add"):
        tracing.inject(headers)
    with tracing.consumer_span("memory.add", {"traceparent": "00-garbage"}), tracing.span_in(None, "add.batch"):
        ran.append(True)
    assert headers == {}
    assert ran == [True]


def test_an_installed_provider_turns_spans_on(monkeypatch: pytest.MonkeyPatch):
    provider = TracerProvider()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    assert tracing.installed()
