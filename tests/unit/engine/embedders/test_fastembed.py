"""The fastembed provider, with no network: the shipped MiniLM laid out as fastembed's local model directory."""

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastembed", reason="the [fastembed] extra is not installed")

from memory_core.core.errors import EmbedderError
from memory_core.core.settings import EmbedderSettings
from memory_core.engine.embedders import fastembed as provider
from memory_core.engine.embedders.fastembed import MARKER_FILE, FastEmbedEmbedder, cached_model_dir
from memory_core.engine.embedders.minilm import MiniLMEmbedder
from tests.local_models import FASTEMBED_MINILM, lay_out_minilm

MINILM = FASTEMBED_MINILM
LOCOMO_ITEMS = Path("/work/shared/data/locomo-dev/items.jsonl")


@pytest.fixture(scope="module")
def local_minilm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lay_out_minilm(tmp_path_factory.mktemp("models") / "all-MiniLM-L6-v2")


@pytest.fixture(scope="module")
def embedder(local_minilm: Path, tmp_path_factory: pytest.TempPathFactory) -> FastEmbedEmbedder:
    cache = tmp_path_factory.mktemp("cache")
    return FastEmbedEmbedder(EmbedderSettings(path=local_minilm, cache_dir=cache), name=MINILM)


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def _generated_texts(count: int) -> list[str]:
    rng = random.Random(7)
    words = [
        "the",
        "a",
        "memory",
        "agent",
        "remembers",
        "Paris",
        "coffee",
        "meeting",
        "2024",
        "café",
        "naïve",
        "東京",
        "emoji",
        "🙂",
        "deadline",
        "budget",
    ]
    texts = []
    for index in range(count - 5):
        length = [1, 3, 8, 16, 30][index % 5]  # short, like conversation turns
        texts.append(" ".join(rng.choice(words) for _ in range(length)) + ("!" * (index % 3)))
    # Five past the 256-token limit, last: both embedders truncate them alike (kept together, as a long text
    # pads its whole batch to 256 tokens, which costs seconds on a busy CPU).
    texts.extend(" ".join(rng.choice(words) for _ in range(300)) for _ in range(5))
    return texts


def _assert_same_vectors(fastembed_vectors: list[list[float]], minilm_vectors: list[list[float]]) -> float:
    left, right = np.asarray(fastembed_vectors), np.asarray(minilm_vectors)
    assert left.shape == right.shape
    cosines = (left * right).sum(axis=1) / (np.linalg.norm(left, axis=1) * np.linalg.norm(right, axis=1))
    assert cosines.min() >= 0.9999, f"lowest cosine {cosines.min():.6f}"
    return float(cosines.min())


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_local_minilm_directory_gives_the_builtin_embedders_vectors(embedder, minilm):
    texts = _generated_texts(500)
    _assert_same_vectors(embedder.embed(texts), minilm.embed(texts))


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(not LOCOMO_ITEMS.is_file(), reason=f"{LOCOMO_ITEMS} is not on this machine")
def test_a_local_minilm_directory_gives_the_builtin_embedders_vectors_on_conversation_turns(embedder, minilm):
    lines = LOCOMO_ITEMS.read_text().splitlines()
    texts = [json.loads(line)["text"] for line in lines[:: max(1, len(lines) // 500)]][:500]
    assert len(texts) == 500
    _assert_same_vectors(embedder.embed(texts), minilm.embed(texts))


def test_the_fingerprint_names_the_model_its_weights_and_pooling(embedder, local_minilm):
    import hashlib

    fingerprint = embedder.fingerprint
    assert fingerprint.provider == "fastembed"
    assert fingerprint.model == MINILM
    assert fingerprint.revision == hashlib.sha256((local_minilm / "model.onnx").read_bytes()).hexdigest()[:16]
    assert (fingerprint.dimension, fingerprint.pooling, fingerprint.normalized) == (384, "mean", True)
    assert (fingerprint.query_prefix, fingerprint.document_prefix) == ("", "")
    assert embedder.model_name == f"fastembed:{MINILM}"
    assert embedder.dimension == 384


def test_vectors_are_unit_length_and_queries_equal_documents_without_a_prefix(embedder):
    texts = ["where did we meet?", "x"]
    vectors = np.asarray(embedder.embed(texts))
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.allclose(vectors, embedder.embed_queries(texts), atol=1e-6)
    assert embedder.embed([]) == []


def test_a_model_with_a_query_prefix_embeds_queries_with_it(local_minilm, tmp_path, monkeypatch, minilm):
    # arctic-embed asks for its search instruction before queries only; fastembed adds none, so the provider does.
    monkeypatch.setitem(
        provider.PREFIXES, MINILM.lower(), ("Represent this sentence for searching relevant passages: ", "")
    )
    prefixed = FastEmbedEmbedder(EmbedderSettings(path=local_minilm, cache_dir=tmp_path), name=MINILM)
    assert prefixed.fingerprint.query_prefix.startswith("Represent this sentence")
    query = "where did we meet?"
    expected = minilm.embed(["Represent this sentence for searching relevant passages: " + query])
    _assert_same_vectors(prefixed.embed_queries([query]), expected)
    _assert_same_vectors(prefixed.embed([query]), minilm.embed([query]))


def test_the_snowflake_arctic_models_get_their_query_prefix():
    for name in ("snowflake/snowflake-arctic-embed-xs", "snowflake/snowflake-arctic-embed-s"):
        assert provider.PREFIXES[name] == ("Represent this sentence for searching relevant passages: ", "")


def test_every_prefixed_model_is_one_fastembed_lists():
    from fastembed import TextEmbedding

    listed = {model["model"].lower() for model in TextEmbedding.list_supported_models()}
    assert set(provider.PREFIXES) <= listed


def test_a_model_fastembed_does_not_list_is_refused_by_name(tmp_path):
    with pytest.raises(EmbedderError, match="'no/such-model'"):
        FastEmbedEmbedder(EmbedderSettings(path=tmp_path, cache_dir=tmp_path), name="no/such-model")


def test_a_local_directory_without_the_weights_says_what_to_do(local_minilm, tmp_path):
    incomplete = tmp_path / "incomplete"
    shutil.copytree(local_minilm, incomplete)
    (incomplete / "model.onnx").unlink()
    with pytest.raises(EmbedderError, match=r"lacks model\.onnx.*MEMORY_EMBEDDER__PATH.*models pull"):
        FastEmbedEmbedder(EmbedderSettings(path=incomplete, cache_dir=tmp_path), name=MINILM)


def test_a_corrupt_weights_file_says_what_to_do(local_minilm, tmp_path):
    corrupt = tmp_path / "corrupt"
    shutil.copytree(local_minilm, corrupt)
    (corrupt / "model.onnx").write_bytes(b"not an onnx model")
    with pytest.raises(EmbedderError, match=r"does not load.*models pull"):
        FastEmbedEmbedder(EmbedderSettings(path=corrupt, cache_dir=tmp_path), name=MINILM)


def test_a_cached_copy_loads_only_once_its_pull_completed(local_minilm, tmp_path, monkeypatch):
    cache = tmp_path / "models"
    target = cached_model_dir(cache, MINILM)
    shutil.copytree(local_minilm, target)
    downloads: list[str] = []

    def no_network(description, hub_dir, progress):
        downloads.append(description.model)
        raise EmbedderError("no network in this test")

    monkeypatch.setattr(provider, "_download", no_network)
    # No marker: a partial copy is never loaded; the provider tries to download instead.
    with pytest.raises(EmbedderError, match="no network"):
        FastEmbedEmbedder(EmbedderSettings(cache_dir=cache), name=MINILM)
    assert downloads == [MINILM]
    (target / MARKER_FILE).write_text("{}")
    loaded = FastEmbedEmbedder(EmbedderSettings(cache_dir=cache), name=MINILM)
    assert loaded.dimension == 384
    assert downloads == [MINILM]
    (target / "model.onnx").write_bytes(b"damaged on disk after its pull")
    with pytest.raises(EmbedderError, match=r"does not load.*delete .* and run: memory-core models pull"):
        FastEmbedEmbedder(EmbedderSettings(cache_dir=cache), name=MINILM)


def test_a_pull_replaces_a_copy_that_never_completed(local_minilm, tmp_path, monkeypatch):
    cache = tmp_path / "models"
    target = cached_model_dir(cache, MINILM)
    target.mkdir(parents=True)
    (target / "model.onnx").write_bytes(b"half")
    monkeypatch.setattr(provider, "_download", lambda description, hub_dir, progress: local_minilm)
    assert provider.pull_model(MINILM, cache) == target
    assert (target / "model.onnx").read_bytes() == (local_minilm / "model.onnx").read_bytes()
    assert (target / MARKER_FILE).is_file()


def test_a_pull_checks_the_download_and_renames_it_into_place(local_minilm, tmp_path, monkeypatch):
    cache = tmp_path / "models"

    def from_disk(description, hub_dir, progress):
        hub_dir.mkdir(parents=True)
        return local_minilm

    monkeypatch.setattr(provider, "_download", from_disk)
    path = provider.pull_model(MINILM, cache)
    assert path == cached_model_dir(cache, MINILM)
    assert json.loads((path / MARKER_FILE).read_text())["model"] == MINILM
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # the staging directory is gone
    assert provider.pull_model(MINILM, cache) == path


def test_a_pull_removes_what_a_killed_pull_left_a_day_ago_and_nothing_newer(local_minilm, tmp_path, monkeypatch):
    import os

    cache = tmp_path / "models"
    parent = cached_model_dir(cache, MINILM).parent
    abandoned, running = parent / f".pull-{cached_model_dir(cache, MINILM).name}-old", parent / ".pull-other-new"
    for leftover in (abandoned, running):
        (leftover / "hub").mkdir(parents=True)
    os.utime(abandoned, (0, 0))
    monkeypatch.setattr(provider, "_download", lambda description, hub_dir, progress: local_minilm)
    provider.pull_model(MINILM, cache)
    assert not abandoned.exists()
    assert running.exists()


def test_a_damaged_download_never_lands_in_the_cache(local_minilm, tmp_path, monkeypatch):
    cache = tmp_path / "models"
    damaged = tmp_path / "damaged"
    shutil.copytree(local_minilm, damaged)
    (damaged / "model.onnx").write_bytes((local_minilm / "model.onnx").read_bytes()[:1000])

    monkeypatch.setattr(provider, "_download", lambda description, hub_dir, progress: damaged)
    with pytest.raises(EmbedderError, match="does not load"):
        provider.pull_model(MINILM, cache)
    assert list(cached_model_dir(cache, MINILM).parent.iterdir()) == []
