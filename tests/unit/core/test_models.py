from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory_core.core.errors import InvalidRequestError
from memory_core.core.models import (
    ChatMessage,
    CompactionConfig,
    DatetimeRange,
    EvictionPolicy,
    MemorySet,
    MemorySetItem,
    MessageRole,
)


def test_chat_message_str_is_role_and_content():
    assert str(ChatMessage(role=MessageRole.ASSISTANT, content="hello")) == "assistant: hello"


@pytest.mark.parametrize("item_type", [str, ChatMessage, "str", "ChatMessage"])
def test_memory_set_round_trips_through_json_with_its_item_type(item_type):
    original = MemorySet(name="notes", item_type=item_type, capacity=8, compaction_config=CompactionConfig(limit=2))
    restored = MemorySet.model_validate_json(original.model_dump_json())
    assert restored == original
    assert restored.item_type is original.item_type


@pytest.mark.parametrize("bad", [int, "int", dict])
def test_memory_set_refuses_other_item_types(bad):
    with pytest.raises(InvalidRequestError, match="item_type"):
        MemorySet(name="notes", item_type=bad)


@pytest.mark.parametrize("name", ["a:b", "*", "..", ".", "a/b", "", "x" * 129, "a b"])
def test_memory_set_names_cannot_carry_separators_or_globs(name):
    with pytest.raises(InvalidRequestError, match="invalid MemorySet: name"):
        MemorySet(name=name)


def test_compaction_limit_must_be_at_least_one():
    with pytest.raises(InvalidRequestError, match="invalid CompactionConfig: limit: .*greater than or equal to 1"):
        CompactionConfig(limit=0)


def test_datetime_range_must_be_ordered():
    now = datetime.now(UTC)
    with pytest.raises(InvalidRequestError, match="before start"):
        DatetimeRange(start=now, end=now - timedelta(seconds=1))


def test_an_unbound_set_says_how_to_get_a_bound_one():
    with pytest.raises(RuntimeError, match="long_term"):
        MemorySet(name="notes").add(["x"])


def test_binding_does_not_change_equality():
    definition = MemorySet(name="notes")
    assert definition.bind(object()) == definition  # type: ignore[arg-type]


def test_item_values_parse_as_text_or_chat_message():
    now = datetime.now(UTC)
    common = {"memory_set_name": "s", "id": "1", "created_time": now, "last_accessed_time": now}
    assert MemorySetItem.model_validate({**common, "value": "text"}).value == "text"
    item = MemorySetItem.model_validate({**common, "value": {"role": "tool", "content": "42"}})
    assert item.value == ChatMessage(role=MessageRole.TOOL, content="42")


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: CompactionConfig(limit=0), "limit"),
        (lambda: CompactionConfig(limit="2"), "limit"),
        (lambda: EvictionPolicy(max_items=3, policy="fifo"), "policy"),
        (lambda: EvictionPolicy(max_items="3"), "max_items"),
        (lambda: ChatMessage(role="robot", content="hi"), "role"),
        (lambda: MemorySet(name="notes", capacity="10"), "capacity"),
        (lambda: MemorySet(name="notes", capacity=10.0), "capacity"),
        (lambda: MemorySet(name="notes", dedup_threshold="0.9"), "dedup_threshold"),
        (lambda: MemorySet(name="notes", context_window="2"), "context_window"),
    ],
)
def test_models_callers_build_refuse_bad_input_with_the_one_error_type_never_coercing(build, field):
    with pytest.raises(InvalidRequestError, match=f": {field}: "):
        build()


def test_json_numbers_still_parse_where_a_float_is_expected():
    # What the worker reads off the broker: 1 for a float field is a float.
    assert MemorySet.model_validate({"name": "n", "dedup_threshold": 1}).dedup_threshold == 1.0
