import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pytest

from memory_core.core.errors import EmbedderError
from memory_core.engine.embedders.minilm import TOKENIZER_FILE, _package_dir


def test_a_missing_model_package_says_how_to_install_it():
    with pytest.raises(EmbedderError, match="ops/install"):
        _package_dir("no_such_model_package_xyz")


def test_the_tokenizer_ships_inside_the_package_unchanged():
    # The model's own tokenizer, byte for byte: vectors are those of all-MiniLM-L6-v2 (NOTICE holds the hash).
    digest = hashlib.sha256(TOKENIZER_FILE.read_bytes()).hexdigest()
    assert digest in (TOKENIZER_FILE.parent / "NOTICE").read_text()
    assert digest == "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"


def test_the_fingerprint_hashes_the_weights_file_without_loading_the_model():
    from memory_core.engine.embedders.minilm import DIMENSION, MODEL_NAME, _model_file, minilm_fingerprint

    fingerprint = minilm_fingerprint()
    assert fingerprint.revision == hashlib.sha256(_model_file().read_bytes()).hexdigest()[:16]
    assert (fingerprint.provider, fingerprint.model, fingerprint.dimension) == ("minilm", MODEL_NAME, DIMENSION)
    assert (fingerprint.pooling, fingerprint.normalized, fingerprint.query_prefix) == ("mean", True, "")
    assert fingerprint.spec == "all-MiniLM-L6-v2"


SHARED_DATA = Path("/work/shared/data")
CHAT_ITEMS = sorted(SHARED_DATA.glob("*/items.jsonl"))


@pytest.fixture(scope="module")
def minilm():
    from memory_core.engine.embedders.minilm import MiniLMEmbedder

    return MiniLMEmbedder(batch_size=4)  # small batches: a few hundred texts run as many batches of each length


def _assert_same_as_one_at_a_time(embedder, texts):
    together = np.asarray(embedder.embed(texts))
    alone = np.asarray([embedder.embed([text])[0] for text in texts])  # no batch, no padding: the reference
    assert together.shape == alone.shape == (len(texts), 384)
    assert np.abs(together - alone).max() < 1e-5


def test_a_batch_of_two_lengths_gives_the_vectors_the_model_always_gave(minilm):
    # Pinned from the arrival-order implementation: a reference that does not share this one's padding code
    # (the tokenizer file pads every text to 128 tokens, which, unmasked, would give other vectors throughout).
    texts = ["Caroline: I went to a LGBTQ support group yesterday and it was so powerful.", "Paris"]
    expected = [
        [-0.02205, 0.06339, -0.023, 0.06839, -0.03539, 0.01506],
        [0.08234, 0.01947, 0.02737, -0.03816, 0.0104, -0.01854],
    ]
    vectors = np.asarray(minilm.embed(texts))
    assert np.abs(vectors[:, :6] - np.asarray(expected)).max() < 1e-4


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_texts_of_mixed_lengths_get_the_vectors_they_get_alone_in_their_own_order(minilm):
    rng = random.Random(5)
    words = ["the", "agent", "remembers", "Paris", "coffee", "2024", "café", "東京", "🙂", "deadline"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.choice([1, 2, 5, 12, 40, 90]))) for _ in range(150)]
    texts += ["", "Paris", "Paris", " ".join(words * 40)]  # empty, a repeat, one past the 256-token limit
    rng.shuffle(texts)
    _assert_same_as_one_at_a_time(minilm, texts)
    assert minilm.embed([]) == []


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(not CHAT_ITEMS, reason=f"no chat datasets in {SHARED_DATA}")
def test_chat_turns_get_the_vectors_they_get_alone_in_their_own_order(minilm):
    texts = []
    for items in CHAT_ITEMS:  # a stride through each: short and long turns, in the order they were said
        lines = items.read_text().splitlines()
        texts += [json.loads(line)["text"] for line in lines[:: max(1, len(lines) // 60)]][:60]
    _assert_same_as_one_at_a_time(minilm, texts)
