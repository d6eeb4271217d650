from __future__ import annotations

import pytest

from memory_core.errors import InvalidRequestError
from memory_core.models import ChatMessage
from memory_core.settings import LimitsSettings
from memory_core.validation import check_filters, check_metadata, check_value, short_repr

LIMITS = LimitsSettings(max_value_chars=10, max_metadata_bytes=80, max_metadata_depth=2)


def test_values_must_match_the_set_type_and_size():
    check_value("short", str, "item 0", LIMITS)
    check_value(ChatMessage(content="short"), ChatMessage, "item 0", LIMITS)
    with pytest.raises(InvalidRequestError, match="item 0 has 11 characters; at most 10"):
        check_value("x" * 11, str, "item 0", LIMITS)
    with pytest.raises(InvalidRequestError, match=r"item 0\.content has 11"):
        check_value(ChatMessage(content="x" * 11), ChatMessage, "item 0", LIMITS)


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ([1], "expected a dict"),
        ({"a": {"b": {"c": 1}}}, "deeper than 2"),
        ({"a": "x" * 100}, "bytes as JSON"),
        ({"a": float("-inf")}, "finite"),
        ({"a": {1, 2}}, "set"),
    ],
)
def test_bad_metadata_is_refused_with_the_reason(metadata, message):
    with pytest.raises(InvalidRequestError, match=message):
        check_metadata(metadata, "metadata", LIMITS)


def test_good_metadata_passes():
    check_metadata({"source": "chat", "n": 1, "ok": True, "tags": ["a"], "none": None}, "metadata", LIMITS)


def test_filters_take_scalars_or_lists_of_them():
    check_filters({"source": "chat", "n": 3, "any": ["a", "b"]})
    with pytest.raises(InvalidRequestError, match="bool"):
        check_filters({"flag": False})


def test_short_repr_cuts_long_values():
    assert short_repr("x" * 500).endswith("...")
    assert len(short_repr("x" * 500)) == 80
