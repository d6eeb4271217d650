import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_core.core.errors import InvalidRequestError
from memory_core.tiers.short_term import decode_value, encode_value

_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary()
_values = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4)
)


@given(_values)
def test_every_storable_value_round_trips_through_json_exactly(value):
    import json

    back = decode_value(json.loads(json.dumps(encode_value(value, "p"))))
    assert back == value
    assert repr(back) == repr(value)  # the same types all the way down (bytes stay bytes, ints stay ints)


def test_user_dicts_that_look_like_tags_stay_dicts():
    tricky = {"$b": "not base64", "$d": {"x": 1}, "$f": "nan"}
    assert decode_value(encode_value(tricky, "p")) == tricky


def test_non_finite_floats_survive():
    assert math.isnan(decode_value(encode_value(float("nan"), "p")))
    assert decode_value(encode_value([-math.inf], "p")) == [-math.inf]


def test_nesting_is_bounded():
    deep: list[object] = []
    for _ in range(40):
        deep = [deep]
    with pytest.raises(ValueError, match="nests deeper"):
        encode_value(deep, "p")


def test_ints_too_long_for_json_are_refused_naming_the_path():
    assert decode_value(encode_value(2**2048 - 1, "p")) == 2**2048 - 1
    with pytest.raises(InvalidRequestError, match=r"value at 'p\[0\]' is an int of 2049 bits; at most 2048"):
        encode_value([2**2048], "p")
