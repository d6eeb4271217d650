"""Embedders: the ``Embedder`` Protocol, all-MiniLM-L6-v2 on ONNX (default) and a hashing one for unit tests."""

from __future__ import annotations

from memory_core.core.settings import EmbedderSettings
from memory_core.engine.embedders.base import Embedder

__all__ = ["Embedder", "open_embedder"]


def open_embedder(settings: EmbedderSettings) -> Embedder:
    """Builds the configured embedder. Called once per worker process, after fork."""
    if settings.model == "hashing":
        from memory_core.engine.embedders.hashing import HashingEmbedder

        return HashingEmbedder()
    from memory_core.engine.embedders.minilm import MiniLMEmbedder

    return MiniLMEmbedder(threads=settings.threads, batch_size=settings.batch_size, max_tokens=settings.max_tokens)
