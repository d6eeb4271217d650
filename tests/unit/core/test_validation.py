from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from memory_core.core.errors import InvalidRequestError
from memory_core.core.messages import NewItem
from memory_core.core.models import ChatMessage
from memory_core.core.settings import LimitsSettings
from memory_core.core.validation import (
    MAX_TTL_SECONDS,
    MAX_WAIT_SECONDS,
    check_count,
    check_filters,
    check_metadata,
    check_seconds,
    check_value,
    parse,
    short_repr,
)

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


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"source\n": "x"}, r"filter key 'source\\n'"),
        ({"\nsource": "x"}, r"filter key '\\nsource'"),
        ({"source": "x\ud800"}, r"filter 'source' value 'x\\ud800' is not valid UTF-8"),
        ({"source": ["ok", "\udfff"]}, r"filter 'source' value '\\udfff' is not valid UTF-8"),
        ({"n": 2**63}, r"filter 'n' value 9223372036854775808 is outside the signed 64-bit range"),
        ({"n": [-(2**63) - 1]}, r"filter 'n' value -9223372036854775809 is outside"),
        ("source", r"filters is str 'source'; expected a dict"),
        ([("source", "x")], r"filters is list .*; expected a dict"),
    ],
)
def test_bad_filters_are_refused_naming_the_value(filters, message):
    with pytest.raises(InvalidRequestError, match=message):
        check_filters(filters)


def test_filters_at_the_edges_of_the_int_range_pass():
    check_filters({"n": [2**63 - 1, -(2**63)]})


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"n": 10**30}, r"metadata\.n is 1000000000000000000000000000000; ints must fit in signed 64 bits"),
        ({"n": 2**63}, r"metadata\.n is 9223372036854775808"),
        ({"n": -(2**63) - 1}, r"metadata\.n is -9223372036854775809"),
        ({"a": [1, {"b": 2**64}]}, r"metadata\.a\[1\]\.b is 18446744073709551616"),
    ],
)
def test_metadata_ints_beyond_64_bits_are_refused_naming_the_key(metadata, message):
    with pytest.raises(InvalidRequestError, match=message):
        check_metadata(metadata, "metadata", LimitsSettings())


def test_metadata_ints_at_the_edges_of_the_64_bit_range_pass():
    check_metadata({"hi": 2**63 - 1, "lo": -(2**63), "flag": True}, "metadata", LimitsSettings())


def test_a_raw_item_message_with_a_ttl_past_the_bound_is_refused():
    # The worker parses every raw message as NewItem: a ttl it could not add to a datetime never gets that far.
    item = {"id": "a", "value": "x", "created_time": datetime.now(UTC), "seq": 1}
    assert parse(NewItem, {**item, "ttl": MAX_TTL_SECONDS}, "item").ttl == MAX_TTL_SECONDS
    with pytest.raises(InvalidRequestError, match=r"ttl: Input should be less than or equal to 3153600000"):
        parse(NewItem, {**item, "ttl": 10**12}, "item")


@pytest.mark.parametrize("value", [0, -1, -0.0, 2**63, 10**400, True, False, float("nan"), float("inf"), "5", None])
def test_check_seconds_refuses_what_is_no_finite_positive_duration(value):
    with pytest.raises(InvalidRequestError, match=r"timeout must be a finite number of seconds above 0 and at most"):
        check_seconds(value, "timeout")


@pytest.mark.parametrize("value", [1, 0.001, MAX_WAIT_SECONDS])
def test_check_seconds_takes_ints_and_floats_in_range(value):
    assert check_seconds(value, "timeout") == float(value)


@pytest.mark.parametrize("value", [-1, 11, 2**63, True, 2.0, float("nan"), "3"])
def test_check_count_names_the_argument_the_value_and_the_range(value):
    with pytest.raises(
        InvalidRequestError, match=rf"k must be an int from 0 to 10, got {re.escape(short_repr(value))}$"
    ):
        check_count(value, "k", 0, 10)
