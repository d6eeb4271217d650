"""What an item's context vector holds: its own words and the ends of the items before it."""

from __future__ import annotations

from memory_core.engine.stores.base import CONTEXT_WORDS, LEXICAL, SPARSE_CONTEXT


def _indices(text: str) -> set[int]:
    return set(LEXICAL.document(text).indices)


def test_the_context_holds_the_end_of_a_long_previous_item_not_its_start() -> None:
    filler = " ".join(["filler"] * CONTEXT_WORDS)
    previous = f"aardvark {filler} zebra"  # aardvark falls outside the last CONTEXT_WORDS words
    context = set(LEXICAL.item_vectors("hello there", [previous])[SPARSE_CONTEXT].indices)
    assert _indices("zebra") <= context
    assert not _indices("aardvark") & context
    assert _indices("hello there") <= context


def test_a_short_previous_item_goes_into_the_context_whole() -> None:
    context = set(LEXICAL.item_vectors("hello there", ["aardvark then zebra"])[SPARSE_CONTEXT].indices)
    assert _indices("aardvark then zebra hello there") <= context
