import math

from memory_core.engine.embedders.hashing import HashingEmbedder


def test_vectors_are_unit_length_deterministic_and_word_based():
    embedder = HashingEmbedder(dimension=64)
    a, b, c = embedder.embed(["green tea", "green tea", "flight to tokyo"])
    assert a == b
    assert math.isclose(sum(v * v for v in a), 1.0)
    assert sum(x * y for x, y in zip(a, c, strict=True)) < 0.5
