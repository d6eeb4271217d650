"""The BM25 model every store indexes items with: its sparse vectors (``bm25`` of an item's text, ``bm25_ctx``
of its text after its previous items') and their weights."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SPARSE_TEXT = "bm25"
SPARSE_CONTEXT = "bm25_ctx"
SPARSE_NAMES = (SPARSE_TEXT, SPARSE_CONTEXT)


@dataclass(frozen=True, slots=True)
class SparseVector:
    """Non-zero dimensions of a sparse vector (BM25 term weights by token id)."""

    indices: tuple[int, ...]
    values: tuple[float, ...]


BM25_AVG_LEN = 96.0
"""The document length (in words kept after stopwords) that BM25 normalizes term weights to. The model's
default, 256, is longer than nearly any memory item, so a long item (an assistant's reply of 300 words)
was barely penalized for its length and outranked the short turn that holds the fact. Chat turns average
13 words in LoCoMo and 121 in LongMemEval; one fixed length keeps weights independent of the corpus.
Measured through ``ops/eval`` in hybrid search (R@5 / MRR), 256 -> 96 with ``BM25_B``: LongMemEval dev
0.747 / 0.658 -> 0.798 / 0.730, LoCoMo dev 0.653 / 0.549 -> 0.644 / 0.540 (48-128 with b 0.9-1.0 is a plateau)."""
BM25_B = 0.9
"""How fully BM25 normalizes for document length (0 none, 1 full; the model's default is 0.75)."""


class Lexical:
    """BM25 term weights from Qdrant's own BM25 model (``qdrant_edge.Bm25``: English, stemmed, stopwords).

    Documents get BM25 term-frequency weights, length-normalized to ``BM25_AVG_LEN`` words; queries get
    1.0 per token. The engine applies IDF at query time (the ``Idf`` modifier), so nothing here depends
    on the rest of the corpus. Changing these weights changes the store's layout (``LAYOUT``).
    """

    def __init__(self) -> None:
        self._model: Any = None  # built on first use: the module is imported where no engine is installed
        self._lock = threading.Lock()  # the model is shared by the worker's threads

    def document(self, text: str) -> SparseVector:
        with self._lock:
            vector = self._bm25().embed_document(text)
        return SparseVector(tuple(vector.indices), tuple(vector.values))

    def query(self, text: str) -> SparseVector:
        with self._lock:
            vector = self._bm25().embed_query(text)
        return SparseVector(tuple(vector.indices), tuple(vector.values))

    def _bm25(self) -> Any:
        # The stores package also holds what the CLI and admin use on disk (sparse copies, the store's
        # owner lock), and a client-only install has no engine: import it when a model is first needed.
        if self._model is None:
            import qdrant_edge as qe

            self._model = qe.Bm25(qe.Bm25Config(avg_len=BM25_AVG_LEN, b=BM25_B))
        return self._model

    def item_vectors(self, text: str, previous: Sequence[str]) -> dict[str, SparseVector]:
        """The two sparse vectors of an item: its text, and its text after the ends of its ``previous`` items'."""
        plain = self.document(text)
        context = self.document("\n".join([*(_tail(p) for p in previous), text])) if previous else plain
        return {SPARSE_TEXT: plain, SPARSE_CONTEXT: context}


CONTEXT_WORDS = 40
"""Words of each previous item that go into an item's context: the end of a turn is what leads to the next,
and a long turn's whole text would drown the item's own words."""


def _tail(text: str) -> str:
    words = text.split()
    return text if len(words) <= CONTEXT_WORDS else " ".join(words[-CONTEXT_WORDS:])


LEXICAL = Lexical()
"""The process-wide BM25 model."""
