"""MemoryService with the in-memory store and the hashing embedder: the worker's logic without a worker."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory_core.core.errors import InvalidRequestError, MemorySetNotFound, SetDefinitionConflict
from memory_core.core.models import MemorySet
from memory_core.core.settings import LimitsSettings
from memory_core.engine.embedders.hashing import HashingEmbedder
from memory_core.engine.service import MemoryService
from memory_core.engine.stores.memory import InMemoryVectorStore


@pytest.fixture
def service() -> MemoryService:
    return MemoryService(store=InMemoryVectorStore(), embedder=HashingEmbedder(), limits=LimitsSettings())


def _scope(**extra):
    return {"v": 1, "namespace": "ns", "key": "k", **extra}


def _add(items):
    now = datetime.now(UTC).isoformat()
    return _scope(
        set_name="notes",
        items=[{"id": i, "value": v, "created_time": now, "seq": n} for n, (i, v) in enumerate(items)],
    )


def _create(service: MemoryService, **definition):
    service.create_set(_scope(definition=MemorySet(name="notes", **definition).model_dump(mode="json")))


def test_create_is_get_or_create_and_conflicts_on_a_different_definition(service: MemoryService):
    _create(service, capacity=5)
    _create(service, capacity=5)
    with pytest.raises(SetDefinitionConflict):
        _create(service, capacity=6)


def test_a_definition_conflict_names_each_differing_field_and_the_ways_out(service: MemoryService):
    _create(service, capacity=5, compaction_config={"model": "claude-a", "limit": 3})
    with pytest.raises(SetDefinitionConflict) as raised:
        _create(service, capacity=6, compaction_config={"model": "claude-b", "limit": 3})
    message = str(raised.value)
    assert message == (
        "memory set 'notes' of namespace 'ns', key 'k' already exists with another definition: "
        "capacity is 5 there, 6 asked; compaction_config.model is 'claude-a' there, 'claude-b' asked. "
        "Use the existing definition (get_memory_set('notes'), or get_or_create_memory_set with its values), "
        "delete the set and create it anew (its items go with it), or choose another set name"
    )
    assert "dedup_threshold" not in message  # fields that agree are not printed


def test_a_definition_conflict_cuts_long_values_short(service: MemoryService):
    _create(service, compaction_config={"prompt": "a" * 500})
    with pytest.raises(SetDefinitionConflict, match="compaction_config.prompt is 'aaa") as raised:
        _create(service, compaction_config={"prompt": "b" * 500})
    assert len(str(raised.value)) < 500


def test_add_requires_the_set(service: MemoryService):
    with pytest.raises(MemorySetNotFound, match="notes"):
        service.add(_add([("a", "x")]))


def test_add_then_get_and_search(service: MemoryService):
    _create(service)
    service.add(_add([("a", "green tea"), ("b", "tokyo flight")]))
    assert [i.id for i in service.get(_scope(set_name="notes")).items] == ["a", "b"]
    hits = service.search(_scope(set_name="notes", query="green tea", limit=1)).items
    assert [h.id for h in hits] == ["a"]


def test_a_repeated_id_in_one_add_keeps_the_last_value(service: MemoryService):
    _create(service)
    service.add(_add([("a", "first"), ("a", "second")]))
    assert [i.value for i in service.get(_scope(set_name="notes")).items] == ["second"]


def test_the_worker_rechecks_types_and_limits_of_raw_messages(service: MemoryService):
    _create(service)
    with pytest.raises(InvalidRequestError, match="holds str"):
        service.add(_add([("a", {"role": "user", "content": "x"})]))
    with pytest.raises(InvalidRequestError, match="v"):
        service.add({**_add([("a", "x")]), "v": 2})
    with pytest.raises(InvalidRequestError, match="namespace"):
        service.add({**_add([("a", "x")]), "namespace": "a:b"})
    with pytest.raises(InvalidRequestError, match="limit 500"):
        service.search(_scope(set_name="notes", query="x", limit=500))


def test_delete_counts_what_existed(service: MemoryService):
    _create(service)
    service.add(_add([("a", "x"), ("b", "y")]))
    assert service.delete(_scope(set_name="notes", ids=["a", "zzz"])).count == 1
    assert service.delete(_scope(set_name="notes")).count == 1
    assert service.size(_scope(set_name="notes")).count == 0


def test_delete_set_reports_whether_it_existed(service: MemoryService):
    _create(service)
    assert service.delete_set(_scope(set_name="notes")).count == 1
    assert service.delete_set(_scope(set_name="notes")).count == 0


def test_a_redactor_cleans_values_and_metadata_before_they_are_embedded_or_stored():
    from memory_core.core.models import ChatMessage
    from memory_core.engine.redaction import Redactor

    embedded: list[str] = []

    class RecordingEmbedder(HashingEmbedder):
        def embed(self, texts):
            embedded.extend(texts)
            return super().embed(texts)

    store = InMemoryVectorStore()
    service = MemoryService(store=store, embedder=RecordingEmbedder(), limits=LimitsSettings(), redactor=Redactor())
    _create(service)
    request = _add([("a", "mail alice@example.com or call 555 123 4567")])
    request["items"][0]["metadata"] = {"contact": "bob@example.org"}
    service.add(request)
    (item,) = service.get(_scope(set_name="notes")).items
    assert item.value == "mail [EMAIL] or call [PHONE]"
    assert item.additional_metadata == {"contact": "[EMAIL]"}
    assert embedded == ["mail [EMAIL] or call [PHONE]"]
    service.create_set(_scope(definition=MemorySet(name="chat", item_type=ChatMessage).model_dump(mode="json")))
    chat = _add([("m", {"role": "user", "content": "I am at carol@example.net"})])
    chat["set_name"] = "chat"
    service.add(chat)
    (message,) = service.get(_scope(set_name="chat")).items
    assert message.value == ChatMessage(content="I am at [EMAIL]")
