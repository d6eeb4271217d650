"""Caches in front of the workers: set definitions now; items, search results and embeddings later."""

from memory_core.cache.definitions import DefinitionCache

__all__ = ["DefinitionCache"]
