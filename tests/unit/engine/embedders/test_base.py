import random

import pytest
from pydantic import ValidationError

from memory_core.engine.embedders.base import EmbedderFingerprint, in_order, length_batches
from memory_core.engine.embedders.hashing import HashingEmbedder, hashing_fingerprint

BASE = EmbedderFingerprint(provider="fastembed", model="BAAI/bge-small-en-v1.5", revision="abc", dimension=384)


@pytest.mark.parametrize(
    "change",
    [
        {"provider": "openai"},
        {"model": "BAAI/bge-base-en-v1.5"},
        {"revision": "abd"},
        {"dimension": 768},
        {"pooling": "cls"},
        {"normalized": False},
        {"query_prefix": "query: "},
        {"document_prefix": "passage: "},
    ],
)
def test_a_fingerprint_that_differs_in_any_field_has_another_id(change):
    assert BASE.model_copy(update=change).id != BASE.id


def test_the_id_is_stable_and_does_not_depend_on_field_order():
    same = EmbedderFingerprint.model_validate(dict(reversed(list(BASE.model_dump().items()))))
    assert same.id == BASE.id
    assert len(BASE.id) == 16
    assert set(BASE.id) <= set("0123456789abcdef")


def test_describe_names_every_part_on_one_line():
    text = BASE.model_copy(update={"query_prefix": "query: "}).describe()
    assert text == "fastembed:BAAI/bge-small-en-v1.5@abc (384 d, mean pooling, normalized, query prefix 'query: ')"


@pytest.mark.parametrize(
    ("fingerprint", "spec"),
    [
        (BASE, "fastembed:BAAI/bge-small-en-v1.5"),
        (
            EmbedderFingerprint(provider="openai", model="text-embedding-3-small", dimension=1536),
            "openai:text-embedding-3-small",
        ),
        (hashing_fingerprint(384), "hashing"),
        (EmbedderFingerprint(provider="minilm", model="all-MiniLM-L6-v2", dimension=384), "all-MiniLM-L6-v2"),
    ],
)
def test_spec_is_the_setting_that_selects_the_embedder(fingerprint, spec):
    assert fingerprint.spec == spec


def test_a_fingerprint_read_back_with_unknown_or_bad_fields_is_refused():
    with pytest.raises(ValidationError):
        EmbedderFingerprint.model_validate({**BASE.model_dump(), "extra": 1})
    with pytest.raises(ValidationError):
        EmbedderFingerprint.model_validate({**BASE.model_dump(), "dimension": 0})


def test_the_hashing_embedder_publishes_its_fingerprint_and_embeds_queries_as_documents():
    embedder = HashingEmbedder(dimension=32)
    assert embedder.fingerprint == hashing_fingerprint(32)
    assert embedder.fingerprint.dimension == embedder.dimension
    assert embedder.embed_queries(["green tea"]) == embedder.embed(["green tea"])


def test_length_batches_group_texts_shortest_first_within_the_padded_token_budget():
    lengths = [30, 2, 250, 8, 8, 31, 2, 100]
    batches = length_batches(lengths, 64)
    assert sorted(position for batch in batches for position in batch) == list(range(len(lengths)))
    assert [[lengths[p] for p in batch] for batch in batches] == [[2, 2, 8, 8], [30, 31], [100], [250]]
    for batch in batches:  # padded to its longest text; a text over the budget alone
        assert len(batch) * max(lengths[p] for p in batch) <= 64 or len(batch) == 1
    assert length_batches([], 64) == []


def test_in_order_puts_each_batchs_vectors_back_at_its_texts_positions():
    rng = random.Random(3)
    lengths = [rng.randint(1, 300) for _ in range(500)]
    batches = length_batches(lengths, 512)
    vectors = [[[float(lengths[p]), float(p)] for p in batch] for batch in batches]  # what a model would return
    assert in_order(batches, vectors) == [[float(length), float(p)] for p, length in enumerate(lengths)]
