"""The fastembed cross-encoder provider, with no network.

No cross-encoder's weights ship with memory-core and none can be downloaded here, so what is tested is what
a worker does without them: the name checked against fastembed's list, a clear ``RerankerError`` when the
model is neither in ``MEMORY_RERANK__PATH`` nor in the cache and cannot be downloaded, and a directory that
holds something else refused at start. Scoring with real weights is for a machine that has them
(``ops/eval --rerank fastembed:...``).
"""

import shutil
from pathlib import Path

import pytest

pytest.importorskip("fastembed", reason="the [fastembed] extra is not installed")

from memory_core.core.errors import RerankerError
from memory_core.core.settings import RerankSettings, Settings
from memory_core.engine.embedders.fastembed import cached_model_dir
from memory_core.engine.rerankers import open_reranker
from memory_core.engine.rerankers.fastembed import FastEmbedReranker
from tests.local_models import lay_out_minilm

CROSS_ENCODER = "Xenova/ms-marco-MiniLM-L-6-v2"


def _open(tmp_path: Path, **rerank: object) -> object:
    settings = Settings(
        _env_file=None,
        rerank={"model": f"fastembed:{CROSS_ENCODER}", **rerank},
        embedder={"cache_dir": tmp_path / "models"},
    )
    return open_reranker(settings)


def test_a_name_fastembed_does_not_list_is_refused_with_an_example(tmp_path):
    with pytest.raises(RerankerError, match=r"lists no cross-encoder 'no/such-model'.*'Xenova/ms-marco-MiniLM-L-6-v2'"):
        FastEmbedReranker(RerankSettings(), name="no/such-model", cache_dir=tmp_path, threads=1)


def test_without_the_model_and_without_a_network_the_worker_is_told_what_to_do(tmp_path, monkeypatch):
    from fastembed.rerank.cross_encoder.onnx_text_cross_encoder import OnnxTextCrossEncoder

    def offline(*args, **kwargs):
        # What fastembed raises when neither the hub nor its other source answers.
        raise ValueError(f"Could not load model {CROSS_ENCODER} from any source.")

    monkeypatch.setattr(OnnxTextCrossEncoder, "download_model", offline)
    with pytest.raises(RerankerError, match=r"could not be downloaded .*check the network.*MEMORY_RERANK__PATH"):
        _open(tmp_path)
    # Nothing half-downloaded is left where a later start would take it for the model.
    assert not cached_model_dir(tmp_path / "models", CROSS_ENCODER).exists()


def test_a_local_directory_without_the_weights_names_the_missing_file_and_the_setting(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(RerankerError, match=r"lacks onnx/model\.onnx; point MEMORY_RERANK__PATH at a complete copy"):
        _open(tmp_path, path=tmp_path / "empty")


def test_a_directory_holding_an_embedding_model_is_refused_at_start(tmp_path):
    model_dir = lay_out_minilm(tmp_path / "minilm")
    (model_dir / "onnx").mkdir()
    shutil.move(model_dir / "model.onnx", model_dir / "onnx" / "model.onnx")
    with pytest.raises(RerankerError, match=rf"cross-encoder '{CROSS_ENCODER}': scoring 2 documents failed"):
        _open(tmp_path, path=model_dir)
