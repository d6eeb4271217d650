"""Long-term memory sets end to end: client -> broker -> worker -> embedder -> embedded Qdrant.

The first group mirrors Apache Flink Agents' long-term memory tests.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from celery import Celery

from memory_core import (
    ChatMessage,
    CompactionConfig,
    InvalidRequestError,
    MemoryClient,
    MemorySet,
    MemorySetNotFound,
    SetDefinitionConflict,
)
from memory_core.core.models import DatetimeRange, FactInfo, MessageRole, Scope
from memory_core.engine.stores.base import fact_payload
from memory_core.workers import services


def _messages() -> list[ChatMessage]:
    return [ChatMessage(role=MessageRole.USER, content=f"This is the no.{i} message.") for i in range(20)]


def test_added_messages_come_back_in_insertion_order(client: MemoryClient, namespace: str):
    ltm = client.long_term(namespace, "agent-1")
    chat = ltm.get_or_create_memory_set("chat", item_type=ChatMessage, capacity=100)
    messages = _messages()
    ids = chat.add(messages)
    items = chat.get()
    assert [item.value for item in items] == messages
    assert [item.id for item in items] == ids
    assert all(not item.compacted and item.score is None for item in items)
    assert chat.size() == 20


def test_search_finds_the_message_that_was_asked_for(client: MemoryClient, namespace: str):
    chat = client.long_term(namespace, "agent-1").get_or_create_memory_set("chat", item_type=ChatMessage)
    chat.add(_messages())
    (hit,) = chat.search("The no.10 message", limit=1)
    assert hit.value == ChatMessage(role=MessageRole.USER, content="This is the no.10 message.")
    assert hit.score is not None
    assert 0 < hit.score <= 1.0001


def test_get_memory_set_equals_the_created_set_and_round_trips_json(client: MemoryClient, namespace: str):
    ltm = client.long_term(namespace, "agent-1")
    created = ltm.get_or_create_memory_set(
        "chat", item_type=ChatMessage, capacity=8, compaction_config=CompactionConfig(limit=2)
    )
    fetched = ltm.get_memory_set("chat")
    assert fetched == created
    assert fetched.item_type is ChatMessage
    assert MemorySet.model_validate_json(created.model_dump_json()) == created


def test_the_issue_example_works_as_written(client: MemoryClient, namespace: str):
    ltm = client.long_term(namespace=namespace, key="user-42")
    notes = ltm.get_or_create_memory_set(
        "notes", item_type=str, capacity=100, compaction_config=CompactionConfig(model="claude-haiku-4-5", limit=2)
    )
    ids = notes.add(
        ["Alice prefers green tea", "Alice moved to Lyon in May"], metadatas=[{"source": "chat"}, {"source": "crm"}]
    )
    assert [i.value for i in notes.get(ids)] == ["Alice prefers green tea", "Alice moved to Lyon in May"]
    hits = notes.search("what does Alice drink?", limit=5, filters={"source": "chat"})
    assert [h.value for h in hits] == ["Alice prefers green tea"]
    assert notes.size() == 2
    assert notes.delete([ids[0]]) == 1
    assert [i.id for i in notes.get()] == [ids[1]]
    assert ltm.delete_memory_set("notes") is True
    assert ltm.delete_memory_set("notes") is False
    with pytest.raises(MemorySetNotFound, match="notes"):
        ltm.get_memory_set("notes")


def test_search_ranks_the_relevant_fact_first(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    notes.add(
        [
            "Bob's flight to Tokyo leaves on Friday",
            "Alice is allergic to peanuts",
            "The quarterly report is due next Monday",
            "Alice drinks green tea every morning",
        ]
    )
    hits = notes.search("what does Alice drink?", limit=4)
    assert hits[0].value == "Alice drinks green tea every morning"
    scores = [h.score or 0.0 for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_filters_match_any_of_a_list(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    notes.add(["a fact", "b fact", "c fact"], metadatas=[{"src": "a"}, {"src": "b"}, {"src": "c"}])
    hits = notes.search("fact", limit=10, filters={"src": ["a", "c"]})
    assert sorted(str(h.value) for h in hits) == ["a fact", "c fact"]


def test_second_get_or_create_with_another_definition_conflicts(client: MemoryClient, namespace: str):
    ltm = client.long_term(namespace, "u")
    first = ltm.get_or_create_memory_set("notes", capacity=10)
    assert ltm.get_or_create_memory_set("notes", capacity=10) == first
    with pytest.raises(SetDefinitionConflict, match="capacity"):
        ltm.get_or_create_memory_set("notes", capacity=11)
    assert ltm.get_memory_set("notes").capacity == 10


def test_adding_an_existing_id_replaces_the_item(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    notes.add(["first", "second"], ids=["a", "b"], metadatas=[{"v": 1}, {"v": 1}])
    notes.add(["first, corrected"], ids=["a"], metadatas=[{"v": 2}])
    items = notes.get()
    assert [(i.id, i.value, i.additional_metadata) for i in items] == [
        ("b", "second", {"v": 1}),
        ("a", "first, corrected", {"v": 2}),
    ]


def test_empty_add_returns_nothing_and_sends_nothing(client: MemoryClient, namespace: str, raw_redis):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    assert notes.add([]) == []
    assert notes.size() == 0


def test_get_leaves_out_unknown_ids_and_keeps_insertion_order(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    notes.add(["one", "two", "three"], ids=["1", "2", "3"])
    assert [i.id for i in notes.get(["3", "nope", "1"])] == ["1", "3"]


def test_delete_all_keeps_the_definition(client: MemoryClient, namespace: str):
    ltm = client.long_term(namespace, "u")
    notes = ltm.get_or_create_memory_set("notes")
    notes.add(["one", "two"])
    assert notes.delete() == 2
    assert notes.size() == 0
    assert ltm.get_memory_set("notes") == notes


def test_each_item_gets_its_own_metadata_copy(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    shared = {"tags": ["x"]}
    ids = notes.add(["one", "two"], metadatas=[shared, shared])
    shared["tags"].append("mutated after add")
    assert [i.additional_metadata for i in notes.get(ids)] == [{"tags": ["x"]}, {"tags": ["x"]}]


def test_wait_false_returns_ids_at_once_and_the_receipt_waits_for_durability(client: MemoryClient, namespace: str):
    ltm = client.long_term(namespace, "u")
    notes = ltm.get_or_create_memory_set("notes")
    receipt = ltm.submit(notes, ["later"], ids=["x"])
    assert receipt.ids == ["x"]
    assert receipt.wait(timeout=30) == ["x"]
    assert [i.value for i in notes.get(["x"])] == ["later"]
    assert notes.add(["async"], ids=["y"], wait=False) == ["y"]


def test_concurrent_adds_share_messages_and_each_gets_its_own_stored_ids(client: MemoryClient, namespace: str):
    ltm = client.long_term(namespace, "u")
    notes = ltm.get_or_create_memory_set("notes")  # exact dedup: a repeated text is stored once
    before = client.adds.messages, client.adds.requests

    def add(i: int) -> list[str]:
        return notes.add([f"fact number {i}", "the shared fact"])  # ids the client names: they may fold

    with ThreadPoolExecutor(16) as pool:
        stored = list(pool.map(add, range(64)))
    messages, requests = client.adds.messages - before[0], client.adds.requests - before[1]
    assert requests == 64
    assert messages < requests, "adds that queued behind a publish should have shared a message"
    assert len({ids[0] for ids in stored}) == 64
    shared = {ids[1] for ids in stored}
    assert len(shared) == 1
    assert notes.size() == 65
    assert {i.value for i in notes.get(sorted(shared))} == {"the shared fact"}


def test_items_carry_times_and_no_internal_fields(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")
    notes.add(["x"], metadatas=[{"source": "crm"}])
    (item,) = notes.get()
    assert not isinstance(item.created_time, DatetimeRange)
    assert item.created_time.tzinfo is not None
    assert item.last_accessed_time == item.created_time
    assert item.additional_metadata == {"source": "crm"}
    assert item.memory_set_name == "notes"


def test_a_value_of_the_wrong_type_for_the_set_is_refused(client: MemoryClient, namespace: str):
    ltm = client.long_term(namespace, "u")
    chat = ltm.get_or_create_memory_set("chat", item_type=ChatMessage)
    with pytest.raises(InvalidRequestError, match="holds ChatMessage"):
        chat.add(["plain text"])
    notes = ltm.get_or_create_memory_set("notes", item_type=str)
    with pytest.raises(InvalidRequestError, match="holds str"):
        notes.add([ChatMessage(content="hi")])


def test_operations_on_a_missing_set_raise_not_found_from_the_worker(client: MemoryClient, namespace: str):
    ltm = client.long_term(namespace, "u")
    ghost = MemorySet(name="ghost")  # never created: the client sends it, the worker refuses it
    with pytest.raises(MemorySetNotFound, match="ghost"):
        ltm.add(ghost, ["x"])
    for call in (lambda: ltm.size("ghost"), lambda: ltm.get("ghost"), lambda: ltm.search("ghost", "x")):
        with pytest.raises(MemorySetNotFound):
            call()


def test_a_fold_keeps_the_callers_id_and_everything_the_caller_set(client: MemoryClient, namespace: str):
    notes = client.long_term(namespace, "u").get_or_create_memory_set("notes")  # exact dedup
    (first,) = notes.add(["Alice is allergic to peanuts"], metadatas=[{"from": "chat"}], ttl=3600)
    # An id the caller names is never folded away: it is stored, and found, under that id.
    stored = notes.add(["Alice is allergic to peanuts"], ids=["peanut"], pinned=True, importance=0.95, source="doctor")
    assert stored == ["peanut"]
    (peanut,) = notes.get(["peanut"])
    assert (peanut.pinned, peanut.importance, peanut.source) == (True, 0.95, "doctor")
    # Without an id, the same text folds into the older item, which takes what this write set.
    assert notes.add(
        ["Alice is allergic to peanuts"], metadatas=[{"checked": True}], pinned=True, importance=0.9, source="nurse"
    ) == [first]
    (merged,) = notes.get([first])
    assert merged.additional_metadata == {"from": "chat", "checked": True}
    assert (merged.pinned, merged.importance, merged.source) == (True, 0.9, "nurse")
    assert merged.expires_at is None  # the later expiry wins, and "never" is the latest
    assert notes.size() == 2
    # A fold never lowers what is there: a plainer copy leaves importance, pinning and source as they are.
    assert notes.add(["Alice is allergic to peanuts"], importance=0.1) == [first]
    (again,) = notes.get([first])
    assert (again.pinned, again.importance, again.source) == (True, 0.9, "nurse")


def test_a_search_leaves_out_a_superseded_fact_unless_asked(client: MemoryClient, namespace: str, worker: Celery):
    ltm = client.long_term(namespace, "u")
    notes = ltm.get_or_create_memory_set("notes")
    old, new = notes.add(["Alice drinks green tea", "Alice drinks green tea with oat milk now"])
    at = datetime(2026, 1, 1, tzinfo=UTC)
    fact = FactInfo(
        formed_by="a-model", op_id="op-1", valid_from=at, valid_to=at + timedelta(days=1), superseded_by=new
    )
    # What formation does when a newer fact replaces an older one, here on the worker's own store.
    services.get(worker).memory.store.set_fields(Scope(namespace, "u", "notes"), [old], fact_payload(fact))
    assert [h.id for h in ltm.search("notes", "green tea")] == [new]
    # Asked for, the superseded fact comes too: a result cached for the default search is not served for it.
    found = {h.id: h for h in ltm.search("notes", "green tea", include_superseded=True)}
    assert found.keys() == {old, new}
    assert found[old].fact == fact
    assert found[new].fact is None
    assert [h.id for h in ltm.search("notes", "green tea")] == [new]
    assert [i.id for i in notes.get()] == [old, new]  # still read by id and listed
    with pytest.raises(InvalidRequestError, match="include_superseded must be True or False, got 'yes'"):
        ltm.search("notes", "green tea", include_superseded="yes")  # type: ignore[arg-type]  # an untyped caller's
