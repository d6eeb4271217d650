"""Stored JSON decodes to data or fails with CorruptDataError; Redis errors map to what they mean."""

from __future__ import annotations

import pytest
import redis
from pydantic import BaseModel

from memory_core.core.errors import BrokerUnavailable, CorruptDataError, RedisCommandError
from memory_core.core.jsoncodec import MAX_STORED_DEPTH, nesting, stored_json, stored_model, stored_object
from memory_core.core.redis_errors import redis_failure


class _Point(BaseModel):
    x: int


@pytest.mark.parametrize(
    "raw",
    [b"[" * 100_000 + b"]" * 100_000, b"\xff\xfe", b"9" * 5000, b'{"a":', b"", b"nan?"],
)
def test_unreadable_json_is_corrupt_data(raw: bytes):
    with pytest.raises(CorruptDataError, match="the thing read back from Redis"):
        stored_json(raw, "the thing")


def test_json_deeper_than_the_bound_is_corrupt_data_and_the_bound_itself_is_not():
    assert nesting(stored_json("[" * MAX_STORED_DEPTH + "]" * MAX_STORED_DEPTH, "x")) == MAX_STORED_DEPTH
    deeper = MAX_STORED_DEPTH + 1
    with pytest.raises(CorruptDataError, match=f"nests {deeper} levels"):
        stored_json("[" * deeper + "]" * deeper, "x")


def test_a_stored_object_must_be_an_object():
    assert stored_object(b'{"a": 1}', "x") == {"a": 1}
    with pytest.raises(CorruptDataError, match="JSON list, not an object"):
        stored_object(b"[1]", "x")


def test_a_stored_model_of_the_wrong_shape_is_corrupt_data():
    assert stored_model(_Point, b'{"x": 1}', "p") == _Point(x=1)
    with pytest.raises(CorruptDataError, match="p read back from Redis is not a valid _Point"):
        stored_model(_Point, b'{"x": "one"}', "p")


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (redis.ConnectionError("refused"), BrokerUnavailable),
        (redis.TimeoutError("slow"), BrokerUnavailable),
        (redis.exceptions.BusyLoadingError("loading"), BrokerUnavailable),
        (redis.exceptions.ReadOnlyError("READONLY"), BrokerUnavailable),
        (redis.ResponseError("value is out of range, must be positive"), RedisCommandError),
        (redis.ResponseError("WRONGTYPE Operation against a key"), CorruptDataError),
    ],
)
def test_only_a_redis_that_cannot_answer_is_unavailable(exc: redis.RedisError, expected: type[Exception]):
    error = redis_failure(exc, "list checkpoints", "redis://h:1/0")
    assert type(error) is expected
    assert "list checkpoints" in str(error)
    assert "redis://h:1/0" in str(error)
