"""Metrics: bounded per-namespace series, and a dashboard that only names series that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry

from memory_core.core import metrics
from memory_core.core.metrics import NamespaceItems

ROOT = Path(__file__).resolve().parents[3]


def _samples(collector: NamespaceItems) -> dict[str, float]:
    return {s.labels["namespace"]: s.value for family in collector.collect() for s in family.samples}


def test_items_per_namespace_show_the_largest_and_sum_the_rest():
    counts = {"a": 5, "b": 50, "c": 7, "d": 1}
    collector = NamespaceItems(lambda: counts, top=2)
    assert _samples(collector) == {"b": 50, "c": 7, "(other)": 6}


def test_items_per_namespace_are_counted_at_scrape_time_and_cached_briefly():
    calls: list[int] = []

    def count() -> dict[str, int]:
        calls.append(1)
        return {"a": 1}

    collector = NamespaceItems(count, top=5, max_age=60)
    CollectorRegistry(auto_describe=True).register(collector)  # must not count: it would open the store at start-up
    assert calls == []
    assert _samples(collector) == {"a": 1}
    assert _samples(collector) == {"a": 1}
    assert len(calls) == 1


def test_a_failing_count_leaves_the_scrape_working():
    def broken() -> dict[str, int]:
        raise OSError("store busy")

    assert _samples(NamespaceItems(broken, top=3)) == {}


def test_the_dashboard_names_only_series_the_code_exports():
    exported = {name for name in REGISTRY._names_to_collectors if name.startswith("memory_core_")}
    exported.add("memory_core_items")
    dashboard = json.loads((ROOT / "ops" / "grafana-dashboard.json").read_text())
    used = {m for p in dashboard["panels"] for t in p["targets"] for m in re.findall(r"memory_core_\w+", t["expr"])}
    assert used
    assert used <= exported, used - exported
    assert metrics.TASKS is not None
