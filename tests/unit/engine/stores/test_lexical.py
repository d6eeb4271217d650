"""BM25 document weights: length-normalized to ``BM25_AVG_LEN`` words, so a long reply does not outrank a short fact."""

from __future__ import annotations

import pytest

from memory_core.engine.stores.base import BM25_AVG_LEN, BM25_B, LEXICAL

K1 = 1.2  # the model's term-frequency saturation


def _weight(text: str, word: str) -> float:
    (index,) = LEXICAL.query(word).indices
    vector = LEXICAL.document(text)
    return vector.values[vector.indices.index(index)]


@pytest.mark.parametrize("length", [1, 12, 96, 300])
def test_a_word_once_in_a_text_of_n_words_weighs_what_bm25_gives(length: int) -> None:
    text = " ".join(["peanut", *(f"w{i}x" for i in range(length - 1))])  # distinct made-up words, none a stopword
    expected = (K1 + 1) / (1 + K1 * (1 - BM25_B + BM25_B * length / BM25_AVG_LEN))
    assert _weight(text, "peanut") == pytest.approx(expected, rel=1e-4)


def test_the_same_word_weighs_less_in_a_long_reply_than_in_a_short_fact() -> None:
    fact = "Alice is allergic to peanuts."
    reply = "Peanuts " + " ".join(f"topic{i}q" for i in range(250))
    assert _weight(fact, "peanuts") > 1.5 * _weight(reply, "peanuts")
