"""Any text model the fastembed library lists (Qdrant's ONNX embedding library, no torch): ``fastembed:<name>``.

Where the weights come from, in order: ``MEMORY_EMBEDDER__PATH`` (a local model directory, never the network),
then ``<cache_dir>/fastembed/<name>`` (a copy an earlier pull completed), else a download. A download goes into
a temporary directory inside ``cache_dir``, is checked (the model's files are there, load, and give vectors of
the listed dimension) and only then renamed into place, so a partial or corrupt download never loads. A
completed copy carries ``MARKER_FILE``; a directory without it is never used.

Prefixes: fastembed's ``query_embed``/``passage_embed`` add no text prefix for any model (only
jina-embeddings-v3 switches a task id there), so the prefixes each model's authors publish for retrieval are
added here, from ``PREFIXES``; both calls are still used, for the models that switch a task. Vectors are
L2-normalized here whatever the model does (some, like nomic-embed and multilingual-e5, are not).

Run as ``python -m memory_core.engine.embedders.fastembed <name> <cache_dir>`` it pulls a model and prints
its progress as JSON lines on stdout: ``memory-core models pull`` runs it so the CLI loads no model runtime.

The same pull, check and load rules serve fastembed's cross-encoders (``memory_core.engine.rerankers``):
each rule takes the model's ``Family``, the text embedding models' by default.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import logging
import math
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Self

import numpy as np

from memory_core.core.errors import ConfigurationError, EmbedderError, MemoryCoreError, RerankerError
from memory_core.core.settings import EmbedderSettings
from memory_core.engine.embedders.base import TYPICAL_TOKENS, EmbedderFingerprint, in_order, length_batches
from memory_core.engine.embedders.roles import Roles, roles_of

logger = logging.getLogger(__name__)

ABANDONED_AFTER = 24 * 3600
"""Seconds after which a pull's temporary directory is taken for one a killed pull left behind."""
MARKER_FILE = "memory-core-model.json"
"""Written into a model directory just before it is renamed into place: its presence means complete."""

_SEARCH_INSTRUCTION = "Represent this sentence for searching relevant passages: "
_QWEN_INSTRUCTION = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"

PREFIXES: dict[str, tuple[str, str]] = {
    # (query prefix, document prefix), by the lower-cased model name, as each model card says for retrieval.
    "baai/bge-base-en": (_SEARCH_INSTRUCTION, ""),
    "baai/bge-base-en-v1.5": (_SEARCH_INSTRUCTION, ""),
    "baai/bge-large-en-v1.5": (_SEARCH_INSTRUCTION, ""),
    "baai/bge-small-en": (_SEARCH_INSTRUCTION, ""),
    "baai/bge-small-en-v1.5": (_SEARCH_INSTRUCTION, ""),
    "baai/bge-small-zh-v1.5": ("为这个句子生成表示以用于检索相关文章：", ""),
    "mixedbread-ai/mxbai-embed-large-v1": (_SEARCH_INSTRUCTION, ""),
    "snowflake/snowflake-arctic-embed-xs": (_SEARCH_INSTRUCTION, ""),
    "snowflake/snowflake-arctic-embed-s": (_SEARCH_INSTRUCTION, ""),
    "snowflake/snowflake-arctic-embed-m": (_SEARCH_INSTRUCTION, ""),
    "snowflake/snowflake-arctic-embed-m-long": (_SEARCH_INSTRUCTION, ""),
    "snowflake/snowflake-arctic-embed-l": (_SEARCH_INSTRUCTION, ""),
    "nomic-ai/nomic-embed-text-v1": ("search_query: ", "search_document: "),
    "nomic-ai/nomic-embed-text-v1.5": ("search_query: ", "search_document: "),
    "nomic-ai/nomic-embed-text-v1.5-q": ("search_query: ", "search_document: "),
    "intfloat/multilingual-e5-large": ("query: ", "passage: "),
    "google/embeddinggemma-300m": ("task: search result | query: ", "title: none | text: "),
    "qwen/qwen3-embedding-0.6b": (_QWEN_INSTRUCTION, ""),
    "qwen/qwen3-embedding-0.6b-q": (_QWEN_INSTRUCTION, ""),
    "qdrant/stella-en-400m-v5-doc-onnx": (_QWEN_INSTRUCTION.replace("query\n", "query.\n") + " ", ""),
}

_INSTALL_HINT = "pip install 'memory-core[fastembed]'"


@dataclass(frozen=True)
class Family:
    """A kind of fastembed model the pull, check and load rules here serve, and how its messages read."""

    module: str
    runtime: str
    """fastembed's class that lists and runs the family's models, in ``module``."""
    registry: str
    """The runtime's attribute listing the classes per model kind."""
    noun: str
    error: type[MemoryCoreError]
    path_setting: str
    """The setting that loads a local copy instead of downloading."""
    pull: str
    """How to fetch a model ahead of time (``{model}``: its name)."""
    example: str


EMBEDDINGS = Family(
    module="fastembed",
    runtime="TextEmbedding",
    registry="EMBEDDINGS_REGISTRY",
    noun="text embedding model",
    error=EmbedderError,
    path_setting="MEMORY_EMBEDDER__PATH",
    pull="run: memory-core models pull fastembed:{model}",
    example="BAAI/bge-small-en-v1.5",
)
CROSS_ENCODERS = Family(
    module="fastembed.rerank.cross_encoder",
    runtime="TextCrossEncoder",
    registry="CROSS_ENCODER_REGISTRY",
    noun="cross-encoder",
    error=RerankerError,
    path_setting="MEMORY_RERANK__PATH",
    pull="start a worker once with network access (it downloads {model} into MEMORY_EMBEDDER__CACHE_DIR)",
    example="Xenova/ms-marco-MiniLM-L-6-v2",
)


def _runtime(family: Family) -> Any:
    try:
        return getattr(importlib.import_module(family.module), family.runtime)
    except ImportError as exc:
        raise family.error(f"fastembed: models need the fastembed library; {_INSTALL_HINT}") from exc


def _description(name: str, family: Family = EMBEDDINGS) -> Any:
    """fastembed's description of ``name`` (case-insensitive), and the class that runs it."""
    for model_class in getattr(_runtime(family), family.registry):
        for description in model_class._list_supported_models():
            if description.model.lower() == name.lower():
                return description
    raise family.error(
        f"fastembed lists no {family.noun} {name!r}; expected a name from "
        f"fastembed.{family.runtime}.list_supported_models(), e.g. {family.example!r}"
    )


def _located(description: Any) -> tuple[Family, Any]:
    """The family of a model's description, and the class that downloads and runs it."""
    for family in (EMBEDDINGS, CROSS_ENCODERS):
        for model_class in getattr(_runtime(family), family.registry):
            if description in model_class._list_supported_models():
                return family, model_class
    raise EmbedderError(f"fastembed has no class for model {description.model!r}")  # pragma: no cover


def cached_model_dir(cache_dir: Path, name: str) -> Path:
    """Where a pulled copy of ``name`` lives (whether or not it is there yet)."""
    return cache_dir / "fastembed" / name.lower().replace("/", "--")


def _is_complete(model_dir: Path) -> bool:
    return (model_dir / MARKER_FILE).is_file()


def _weights_files(description: Any) -> list[str]:
    return [description.model_file, *description.additional_files]


def _weights_hash(model_dir: Path, description: Any) -> str:
    """sha256 (first 16 hex) of the weights files, in order: equal hashes mean equal weights."""
    digest = hashlib.sha256()
    for relative in _weights_files(description):
        with (model_dir / relative).open("rb") as weights:
            for chunk in iter(lambda: weights.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:16]


def _pooling(model: Any) -> Literal["mean", "cls", "none"]:
    """The pooling fastembed applies to this model, in the fingerprint's terms."""
    from fastembed.text.custom_text_embedding import CustomTextEmbedding
    from fastembed.text.onnx_embedding import OnnxTextEmbedding
    from fastembed.text.pooled_embedding import PooledEmbedding

    if isinstance(model, CustomTextEmbedding):
        pooling = str(model._pooling.value)
        return "cls" if pooling == "CLS" else "mean" if pooling == "MEAN" else "none"
    if isinstance(model, PooledEmbedding):
        return "mean"
    if type(model) is OnnxTextEmbedding:
        return "cls"
    # The model pools inside its graph (embeddinggemma, granite, CLIP), takes the last token (Qwen3) or has
    # no transformer (potion): the model id already tells these spaces apart.
    return "none"


def _load(name: str, model_dir: Path, *, threads: int, cached: bool = False, family: Family = EMBEDDINGS) -> Any:
    """fastembed's model over the files in ``model_dir``: never a download. ``cached``: a pulled copy (which a
    new pull replaces only once it is deleted)."""
    description = _description(name, family)
    pull = family.pull.format(model=description.model)
    remedy = (
        f"delete {str(model_dir)!r} and {pull}"
        if cached
        else f"point {family.path_setting} at a complete copy, or {pull}"
    )
    missing = [f for f in _weights_files(description) if not (model_dir / f).is_file()]
    if missing:
        raise family.error(
            f"fastembed model {description.model!r} in {str(model_dir)!r} lacks {', '.join(missing)}; {remedy}"
        )
    try:
        return _runtime(family)(
            model_name=description.model,
            cache_dir=str(model_dir),
            threads=threads,
            providers=["CPUExecutionProvider"],
            specific_model_path=str(model_dir),
        )
    except Exception as exc:  # fastembed and onnxruntime raise untyped errors for bad files
        raise family.error(
            f"fastembed model {description.model!r} in {str(model_dir)!r} does not load ({exc}); {remedy}"
        ) from exc


ProgressCallback = Callable[[int, int], None]
"""Called with (bytes done, bytes expected so far) while a pull downloads."""


def pull_model(
    name: str, cache_dir: Path, *, progress: ProgressCallback | None = None, family: Family = EMBEDDINGS
) -> Path:
    """Downloads ``name`` into ``cache_dir`` once and returns its directory; returns at once if it is there.

    The download lands in a temporary directory inside ``cache_dir`` (same filesystem: the rename is atomic),
    is loaded and checked, and only then renamed into place.
    """
    description = _description(name, family)
    final = cached_model_dir(cache_dir, description.model)
    if _is_complete(final):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_pulls(final)
    staging = Path(tempfile.mkdtemp(prefix=f".pull-{final.name}-", dir=final.parent))
    try:
        snapshot = _download(description, staging / "hub", progress)
        local = staging / "model"
        shutil.copytree(snapshot, local)  # follows the hub cache's symlinks: the copy holds the files
        _check(description, local, family)
        marker = {"model": description.model, "revision": _weights_hash(local, description)}
        (local / MARKER_FILE).write_text(json.dumps(marker))
        if final.exists() and not _is_complete(final):
            final.rename(staging / "incomplete")  # never loaded (no marker): copied in by hand, or half-deleted
        try:
            local.rename(final)
        except OSError:
            if not _is_complete(final):  # not a concurrent pull that finished first
                raise
        logger.info("pulled fastembed model %s into %s", description.model, final)
        return final
    except OSError as exc:
        raise family.error(
            f"fastembed model {description.model!r}: writing into {str(cache_dir)!r} failed: {exc}"
        ) from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def open_model(
    name: str, *, path: Path | None, cache_dir: Path, threads: int, family: Family = EMBEDDINGS
) -> tuple[Any, Any, Path]:
    """fastembed's description of ``name``, its loaded model and the directory it came from: ``path`` when set
    (never the network), else the pulled copy in ``cache_dir``, pulled first if it is not complete there."""
    description = _description(name, family)
    if path is not None:
        model_dir = path
    else:
        model_dir = cached_model_dir(cache_dir, description.model)
        if not _is_complete(model_dir):
            logger.info("fastembed model %s is not in %s: downloading it", description.model, cache_dir)
            model_dir = pull_model(description.model, cache_dir, family=family)
    model = _load(description.model, model_dir, threads=threads, cached=path is None, family=family)
    return description, model, model_dir


def _remove_abandoned_pulls(final: Path) -> None:
    """Removes what killed pulls of this model left (a day old: a pull still running is never that slow)."""
    for leftover in final.parent.glob(f".pull-{final.name}-*"):
        with contextlib.suppress(OSError):
            if time.time() - leftover.stat().st_mtime > ABANDONED_AFTER:
                shutil.rmtree(leftover, ignore_errors=True)


def _download(description: Any, hub_dir: Path, progress: ProgressCallback | None) -> Path:
    kwargs: dict[str, Any] = {}
    if progress is not None:
        kwargs["tqdm_class"] = _progress_class(progress)
    family, model_class = _located(description)
    try:
        return Path(model_class.download_model(description, str(hub_dir), retries=1, **kwargs))
    except Exception as exc:  # the hub client raises many untyped errors for one cause: no model reached
        raise family.error(
            f"fastembed model {description.model!r} could not be downloaded ({exc}); check the network (or "
            f"HF_ENDPOINT), or copy the model to this machine and set {family.path_setting} to its directory"
        ) from exc


def _check(description: Any, model_dir: Path, family: Family = EMBEDDINGS) -> None:
    model = _load(description.model, model_dir, threads=1, family=family)
    if family is CROSS_ENCODERS:
        scores = list(model.rerank("memory-core checks a download", ["a download to check", "an unrelated text"]))
        if len(scores) != 2 or not all(math.isfinite(float(score)) for score in scores):
            raise RerankerError(
                f"fastembed cross-encoder {description.model!r} scores two texts as {scores!r}; the download is "
                f"damaged: start the worker again to download it anew"
            )
        return
    (vector,) = list(model.passage_embed(["memory-core checks a downloaded model"]))
    if len(vector) != description.dim:
        raise EmbedderError(
            f"fastembed model {description.model!r} gives vectors of {len(vector)} dimensions, expected "
            f"{description.dim}; the download is damaged: run memory-core models pull again"
        )


def _progress_class(progress: ProgressCallback) -> type:
    """A stand-in for tqdm that the hub client feeds with byte counts (it creates several: bytes and files)."""

    class _Bytes:
        done = 0
        total = 0

        def __init__(self, *args: Any, total: float | None = None, unit: str = "it", **kwargs: Any) -> None:
            self._counts_bytes = unit == "B"
            self.total = int(total or 0)
            self.n = 0
            self.desc = str(kwargs.get("desc", ""))
            self._report()

        def _report(self) -> None:
            if self._counts_bytes and self.desc.startswith("Reconstruct"):
                progress(self.n, self.total)

        def update(self, n: float | None = 1) -> None:
            self.n += int(n or 0)
            self._report()

        def refresh(self) -> None:
            self._report()

        def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
            self.desc = desc or ""

        set_description_str = set_description

        def set_postfix_str(self, *args: Any, **kwargs: Any) -> None:
            return None

        def close(self) -> None:
            return None

        def __enter__(self) -> Self:
            return self

        def __exit__(self, *args: object) -> None:
            return None

        def __iter__(self) -> Any:
            return iter(())

    return _Bytes


class FastEmbedEmbedder:
    """A fastembed text model on onnxruntime, loaded from a local directory or the cache (pulled once)."""

    def __init__(self, settings: EmbedderSettings, *, name: str) -> None:
        description, self._model, model_dir = open_model(
            name, path=settings.path, cache_dir=settings.cache_dir, threads=settings.threads
        )
        self._limit_tokens(settings.max_tokens)
        self._name = description.model
        self._dimension = int(description.dim)
        roles = roles_of(settings, default=Roles(*PREFIXES.get(description.model.lower(), ("", ""))))
        if roles.query_params or roles.document_params:
            raise ConfigurationError(
                f"MEMORY_EMBEDDER__ROLES / __QUERY_PARAMS / __DOCUMENT_PARAMS ask for request fields, which only an "
                f"endpoint takes (openai:); fastembed:{name} runs here: give its roles as __QUERY_PREFIX and "
                "__DOCUMENT_PREFIX, or leave them unset for the model's published prefixes"
            )
        self._query_prefix, self._document_prefix = roles.query_prefix, roles.document_prefix
        self._batch_size = settings.batch_size
        # fastembed tokenizes and runs in one call and its tokenizer keeps padding state: one call at a time.
        self._lock = threading.Lock()
        self._fingerprint = EmbedderFingerprint(
            provider="fastembed",
            model=description.model,
            revision=_weights_hash(model_dir, description),
            dimension=self._dimension,
            pooling=_pooling(self._model.model),
            normalized=True,
            query_prefix=self._query_prefix,
            document_prefix=self._document_prefix,
        )
        (probe,) = self.embed(["memory-core checks the model"])
        if len(probe) != self._dimension:
            raise EmbedderError(
                f"fastembed model {self._name!r} in {str(model_dir)!r} gives {len(probe)}-d vectors, expected "
                f"{self._dimension}; point MEMORY_EMBEDDER__PATH at the right model, or run memory-core models pull"
            )

    def _limit_tokens(self, max_tokens: int) -> None:
        """Truncates at ``max_tokens`` when the model's own limit is longer (bounds the CPU cost per text)."""
        tokenizer = getattr(self._model.model, "tokenizer", None)
        if tokenizer is None or tokenizer.truncation is None:
            return
        if tokenizer.truncation["max_length"] > max_tokens:
            tokenizer.enable_truncation(max_length=max_tokens, direction=tokenizer.truncation["direction"])

    @property
    def model_name(self) -> str:
        return f"fastembed:{self._name}"

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def fingerprint(self) -> EmbedderFingerprint:
        return self._fingerprint

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self._run(self._model.passage_embed, [self._document_prefix + text for text in texts])

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self._run(self._model.query_embed, [self._query_prefix + text for text in texts])

    def _run(self, embed: Callable[..., Any], texts: list[str]) -> list[list[float]]:
        """fastembed pads each batch to its longest text: it is handed batches of similar length
        (``length_batches``), one call each, and the vectors are put back in the caller's order."""
        if not texts:
            return []
        with self._lock:
            batches = length_batches(self._token_counts(texts), self._batch_size * TYPICAL_TOKENS)
            try:
                rows = [list(embed([texts[p] for p in batch], batch_size=len(batch))) for batch in batches]
            except Exception as exc:  # onnxruntime raises its own untyped errors
                raise EmbedderError(f"fastembed: embedding a batch of {len(texts)} texts failed: {exc}") from exc
        matrix = np.asarray(in_order(batches, rows), dtype=np.float32)
        matrix /= np.clip(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12, None)
        return [row.tolist() for row in matrix]

    def _token_counts(self, texts: list[str]) -> list[int]:
        """Each text's tokens, by the model's tokenizer (its padding pads them all alike: the mask counts).
        A model without one pads nothing: equal counts keep arrival order, ``batch_size`` texts a batch."""
        tokenizer = getattr(self._model.model, "tokenizer", None)
        if tokenizer is None:
            return [TYPICAL_TOKENS] * len(texts)
        return [sum(encoding.attention_mask) for encoding in tokenizer.encode_batch(texts)]


def _main(argv: Sequence[str]) -> int:
    """``<name> <cache_dir>``: pulls, printing ``{"done": n, "total": n}`` lines, then ``{"path": dir,
    "downloaded": bool}``, or ``{"error": message}`` and exit status 1. ``<name> --check <dir>``: loads the
    model in ``dir`` as a worker given it as ``MEMORY_EMBEDDER__PATH`` does, and checks a vector as a pull
    does, printing ``{"path": dir}`` or ``{"error": message}`` and exit status 1."""
    if len(argv) == 3 and argv[1] == "--check":
        try:
            _check(_description(argv[0]), Path(argv[2]))
        except EmbedderError as exc:
            print(json.dumps({"error": str(exc)}), flush=True)
            return 1
        print(json.dumps({"path": argv[2]}), flush=True)
        return 0
    name, cache_dir = argv

    def report(done: int, total: int) -> None:
        print(json.dumps({"done": done, "total": total}), flush=True)

    try:
        cached = _is_complete(cached_model_dir(Path(cache_dir), _description(name).model))
        path = pull_model(name, Path(cache_dir), progress=report)
    except EmbedderError as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
        return 1
    print(json.dumps({"path": str(path), "downloaded": not cached}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
