from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from memory_core.models import (
    ChatMessage,
    CompactionConfig,
    DatetimeRange,
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
    with pytest.raises(ValidationError, match="item_type"):
        MemorySet(name="notes", item_type=bad)


@pytest.mark.parametrize("name", ["a:b", "*", "..", ".", "a/b", "", "x" * 129, "a b"])
def test_memory_set_names_cannot_carry_separators_or_globs(name):
    with pytest.raises(ValidationError):
        MemorySet(name=name)


def test_compaction_limit_must_be_at_least_one():
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        CompactionConfig(limit=0)


def test_datetime_range_must_be_ordered():
    now = datetime.now(UTC)
    with pytest.raises(ValidationError, match="before start"):
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
