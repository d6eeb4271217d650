import json

import numpy as np
import pytest

from memory_core.engine.embedders.cache import decode_vector, encode_vector


def test_a_packed_vector_comes_back_exactly():
    vector = np.random.default_rng(1).standard_normal(384).astype(np.float32).tolist()
    packed = encode_vector(vector)
    assert json.loads(packed).keys() == {"f32"}  # JSON, never pickle
    assert decode_vector(packed.encode()) == vector
    assert len(packed) < len(json.dumps(vector)) / 3


def test_a_vector_cached_as_a_json_list_by_an_earlier_version_still_reads():
    assert decode_vector(b"[0.5, -0.25, 1]") == [0.5, -0.25, 1.0]


@pytest.mark.parametrize("raw", [b"not json", b'{"f32": "!!"}', b'{"f32": "AAA="}', b'{"other": 1}', b"3"])
def test_anything_else_is_a_miss_not_an_error(raw: bytes):
    assert decode_vector(raw) is None
