"""The worker meters how long each task waited in its queue: the lag operators alert on."""

from __future__ import annotations

import time

from prometheus_client import REGISTRY

from memory_core import MemoryClient
from memory_core.core import routing
from memory_core.core.dispatch import SENT_AT_HEADER
from memory_core.core.settings import Settings
from tests.integration.rawbroker import add_kwargs, publish_raw
from tests.integration.waiting import wait_for


def _waits(queue: str) -> tuple[float, float]:
    labels = {"queue": queue}
    count = REGISTRY.get_sample_value("memory_core_queue_wait_seconds_count", labels) or 0.0
    total = REGISTRY.get_sample_value("memory_core_queue_wait_seconds_sum", labels) or 0.0
    return count, total


def test_a_task_published_30_s_ago_is_metered_as_30_s_of_queue_wait(
    client: MemoryClient, settings: Settings, namespace: str
):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    count, total = _waits(routing.WRITE_QUEUE)
    sent_at = time.time() - 30  # as if the write queue had been 30 s behind
    publish_raw(settings, routing.ADD, add_kwargs(namespace, "late", "x"), headers={SENT_AT_HEADER: sent_at})
    wait_for(lambda: [item.id for item in notes.get()] == ["late"], 30)
    wait_for(lambda: _waits(routing.WRITE_QUEUE)[0] == count + 1, 5)
    waited = _waits(routing.WRITE_QUEUE)[1] - total
    assert 30 <= waited < 60


def test_every_task_a_client_sends_is_metered_in_its_own_queue(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    writes, _ = _waits(routing.WRITE_QUEUE)
    reads, _ = _waits(routing.READ_QUEUE)
    notes.add(["green tea"])
    notes.search("tea")
    assert _waits(routing.WRITE_QUEUE)[0] == writes + 1
    assert _waits(routing.READ_QUEUE)[0] >= reads + 1
