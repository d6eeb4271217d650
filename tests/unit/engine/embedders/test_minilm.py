import hashlib

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
