"""Any cross-encoder the fastembed library lists (ONNX, no torch): ``fastembed:<name>``, e.g.
``fastembed:Xenova/ms-marco-MiniLM-L-6-v2``.

Where the weights come from follows the embedders' rules (``memory_core.engine.embedders.fastembed``, which
this module shares rather than copies): ``MEMORY_RERANK__PATH`` (a local model directory, never the network),
else a completed copy in ``MEMORY_EMBEDDER__CACHE_DIR``, else a download, checked and renamed into place.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from pathlib import Path

from memory_core.core.errors import RerankerError
from memory_core.core.settings import RerankSettings
from memory_core.engine.embedders.fastembed import CROSS_ENCODERS, open_model
from memory_core.engine.rerankers.base import Ranking

logger = logging.getLogger(__name__)


class FastEmbedReranker:
    """A fastembed cross-encoder on onnxruntime; one call at a time (its tokenizer keeps padding state)."""

    def __init__(self, settings: RerankSettings, *, name: str, cache_dir: Path, threads: int) -> None:
        description, self._model, _ = open_model(
            name, path=settings.path, cache_dir=cache_dir, threads=threads, family=CROSS_ENCODERS
        )
        self._name = description.model
        self._lock = threading.Lock()
        self.rerank("memory-core checks the model", ["a text about the check", "an unrelated text"], 2)

    @property
    def model_name(self) -> str:
        return f"fastembed:{self._name}"

    def rerank(self, query: str, documents: Sequence[str], top_n: int) -> Ranking:
        if not documents:
            return []
        with self._lock:
            try:
                scores = [float(s) for s in self._model.rerank(query, list(documents), batch_size=len(documents))]
            except Exception as exc:  # onnxruntime raises its own untyped errors
                raise RerankerError(
                    f"fastembed cross-encoder {self._name!r}: scoring {len(documents)} documents failed: {exc}"
                ) from exc
        if len(scores) != len(documents):
            raise RerankerError(
                f"fastembed cross-encoder {self._name!r} scored {len(scores)} of {len(documents)} documents"
            )
        if not all(math.isfinite(score) for score in scores):
            raise RerankerError(f"fastembed cross-encoder {self._name!r} gave a score that is not a finite number")
        ranked = sorted(enumerate(scores), key=lambda pair: pair[1], reverse=True)
        return ranked[:top_n]

    def close(self) -> None:
        """Nothing to release: the model lives as long as the process."""
