"""Vector stores: the ``VectorStore`` Protocol and its adapters (embedded Edge, qdrant-client, in-memory)."""

from __future__ import annotations

import re
from collections.abc import Callable

from memory_core.core.errors import ConfigurationError
from memory_core.core.settings import QdrantSettings, redact_url
from memory_core.engine.embedders.base import EmbedderFingerprint
from memory_core.engine.stores.base import ItemRecord, VectorStore, point_id
from memory_core.engine.stores.fingerprints import META_SUFFIX

__all__ = ["ItemRecord", "VectorStore", "collection_name", "meta_collection_name", "open_store", "point_id"]


LAYOUT = "v3"
"""The item layout. v2 added the BM25 sparse vectors (``bm25``, ``bm25_ctx``) to the dense-only layout;
v3 length-normalizes their weights to ``BM25_AVG_LEN`` words. When a store of this layout is first
opened empty, it is filled from the newest earlier layout found (``earlier_collection_names``), its BM25
vectors made anew from the stored texts; the old collection or directory stays as a backup."""
EARLIER_LAYOUTS = ("v2", "")
"""Layouts a store can be migrated from, newest first ("" is the dense-only layout, which had no suffix)."""


def collection_name(settings: QdrantSettings, model_name: str) -> str:
    """One collection per embedding model (vectors of different models never share an index) and layout."""
    return _named(settings, model_name, LAYOUT)


def earlier_collection_names(settings: QdrantSettings, model_name: str) -> tuple[str, ...]:
    """The collection names of the earlier layouts, newest first."""
    return tuple(_named(settings, model_name, layout) for layout in EARLIER_LAYOUTS)


def _named(settings: QdrantSettings, model_name: str, layout: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", model_name.lower()).strip("_")
    return f"{settings.collection_prefix}_{slug}" + (f"_{layout}" if layout else "")


def meta_collection_name(settings: QdrantSettings) -> str:
    """The store's metadata collection (its embedder fingerprint): one per store, whatever the model."""
    return f"{settings.collection_prefix}{META_SUFFIX}"


def pre_fingerprint_collections(settings: QdrantSettings) -> dict[str, Callable[[], EmbedderFingerprint]]:
    """Collection name -> the fingerprint of the model that filled it, for stores made before fingerprints
    were recorded, MiniLM's first (every layout of each: a store may still await its layout migration)."""
    from memory_core.engine.embedders import pre_fingerprint_models

    return {
        name: fingerprint
        for model, fingerprint in pre_fingerprint_models().items()
        for name in (collection_name(settings, model), *earlier_collection_names(settings, model))
    }


def open_store(
    settings: QdrantSettings, *, model_name: str, dimension: int, fingerprint: EmbedderFingerprint | None = None
) -> VectorStore:
    """Opens the configured store. Called once per worker process, after fork.

    With ``fingerprint`` (the embedder's), a store that holds another embedder's vectors is refused with
    ``ConfigurationError``, before anything is created for this model; a store with none recorded gets one
    (``memory_core.engine.stores.fingerprints``).
    """
    from memory_core.engine.stores.faults import with_faults
    from memory_core.engine.stores.metered import metered

    store = _open(settings, model_name=model_name, dimension=dimension, fingerprint=fingerprint)
    return with_faults(metered(store), settings.fault_flag)


def _open(
    settings: QdrantSettings, *, model_name: str, dimension: int, fingerprint: EmbedderFingerprint | None
) -> VectorStore:
    collection = collection_name(settings, model_name)
    earlier = earlier_collection_names(settings, model_name)
    meta = meta_collection_name(settings)
    legacy = pre_fingerprint_collections(settings) if fingerprint is not None else None
    if settings.backend == "edge":
        from memory_core.engine.stores.edge import EdgeVectorStore

        return EdgeVectorStore(
            settings.path,
            collection=collection,
            dimension=dimension,
            earlier=earlier,
            tombstone_ttl=settings.tombstone_ttl,
            meta=meta,
            fingerprint=fingerprint,
            legacy=legacy,
        )
    from memory_core.engine.stores.qdrant import QdrantVectorStore

    if settings.backend == "server":
        if not settings.url:
            raise ConfigurationError(
                "MEMORY_QDRANT__BACKEND='server' needs MEMORY_QDRANT__URL (e.g. http://qdrant:6333)"
            )
        if not settings.url.startswith(("http://", "https://")):
            # Without a scheme, qdrant-client would take it for a local directory and start an empty store there.
            raise ConfigurationError(
                f"MEMORY_QDRANT__URL must be an http:// or https:// URL with MEMORY_QDRANT__BACKEND='server', "
                f"got {redact_url(settings.url)!r} (e.g. http://qdrant:6333)"
            )
        url, api_key = settings.url, settings.api_key.get_secret_value() if settings.api_key else None
    else:
        # "local": qdrant-client's embedded mode, in memory or in a directory (tests, tiny deployments).
        url, api_key = settings.url or str(settings.path), None
    return QdrantVectorStore.connect(
        url,
        api_key=api_key,
        timeout=settings.timeout,
        collection=collection,
        dimension=dimension,
        earlier=earlier,
        tombstone_ttl=settings.tombstone_ttl,
        meta=meta,
        fingerprint=fingerprint,
        legacy=legacy,
    )
