from __future__ import annotations

import pytest

from memory_core.core.errors import ConfigurationError
from memory_core.core.settings import QdrantSettings
from memory_core.engine.stores import open_store


@pytest.mark.parametrize("url", ["qdrant:6333", "/var/lib/qdrant", "grpc://qdrant:6334"])
def test_a_server_url_without_http_is_refused_before_anything_is_opened(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # qdrant-client would create the "directory" here
    settings = QdrantSettings(backend="server", url=url)
    with pytest.raises(ConfigurationError, match=r"MEMORY_QDRANT__URL must be an http:// or https:// URL") as err:
        open_store(settings, model_name="hashing", dimension=8)
    assert repr(url) in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_a_server_backend_needs_a_url():
    with pytest.raises(ConfigurationError, match="needs MEMORY_QDRANT__URL"):
        open_store(QdrantSettings(backend="server"), model_name="hashing", dimension=8)


def test_every_model_name_of_a_store_from_before_fingerprints_maps_to_its_filler(tmp_path):
    from memory_core.engine.embedders.hashing import hashing_fingerprint
    from memory_core.engine.embedders.minilm import minilm_fingerprint
    from memory_core.engine.stores import meta_collection_name, pre_fingerprint_collections

    settings = QdrantSettings(path=tmp_path)
    legacy = {name: make() for name, make in pre_fingerprint_collections(settings).items()}
    assert legacy == {
        "memory_core_all_minilm_l6_v2_v3": minilm_fingerprint(),
        "memory_core_all_minilm_l6_v2_v2": minilm_fingerprint(),
        "memory_core_all_minilm_l6_v2": minilm_fingerprint(),
        "memory_core_hashing_384_v3": hashing_fingerprint(384),
        "memory_core_hashing_384_v2": hashing_fingerprint(384),
        "memory_core_hashing_384": hashing_fingerprint(384),
    }
    assert next(iter(legacy)) == "memory_core_all_minilm_l6_v2_v3"  # MiniLM decides first
    assert meta_collection_name(settings) == "memory_core__meta"
    assert meta_collection_name(settings) not in legacy
