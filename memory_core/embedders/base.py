"""The embedder seam."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Embedder(Protocol):
    """Turns texts into unit-length vectors; cosine similarity between them means relatedness."""

    @property
    def model_name(self) -> str:
        """A stable name of the model; the store keeps one collection per model name."""
        ...

    @property
    def dimension(self) -> int:
        """The length of every vector."""
        ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...
