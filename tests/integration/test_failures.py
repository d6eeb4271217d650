"""Failures the caller must see clearly: Redis down, untrusted serializers."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from memory_core import BrokerUnavailable, MemoryClient
from memory_core.core import routing

from .conftest import make_settings
from .rawbroker import add_kwargs, publish_raw


def test_an_unreachable_redis_fails_fast_with_a_typed_error_naming_it(tmp_path: Path):
    settings = make_settings("redis://:hunter2@127.0.0.1:1/0", tmp_path, client={"publish_retries": 0})
    started = time.monotonic()
    with MemoryClient(settings) as client, pytest.raises(BrokerUnavailable, match="127.0.0.1:1") as info:
        client.long_term("acme", "u").get_or_create_memory_set("notes")
    assert time.monotonic() - started < 10
    assert "hunter2" not in str(info.value)


def test_a_pickled_message_is_refused_and_never_executed(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    publish_raw(client.settings, routing.ADD, add_kwargs(namespace, "p", "from pickle"), serializer="pickle")
    notes.add(["after"], ids=["j"])  # the same queue, behind the pickled message: it has been consumed
    assert [i.id for i in notes.get()] == ["j"]
