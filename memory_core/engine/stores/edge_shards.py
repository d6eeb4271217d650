"""Qdrant Edge shards on disk: their configurations, opening them, the engine's errors as ours, and the shard of an
earlier layout that a migration reads."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import qdrant_edge as qe

from memory_core.core.errors import StoreError, TransientStoreError
from memory_core.engine.stores.lexical import SPARSE_NAMES
from memory_core.engine.stores.migration import KEY_FIELDS

DENSE = "dense"
SCROLL_PAGE = 1_000
_TRANSIENT_MARKERS = ("WouldBlock", "timed out", "Timeout", "temporarily")


@contextmanager
def translated(operation: str) -> Iterator[None]:
    """Raises what the engine raises inside as ``StoreError`` (``TransientStoreError`` when retrying may help)."""
    try:
        yield
    except (StoreError, ValueError, TypeError):
        raise
    except Exception as exc:  # qdrant_edge raises bare Exception; translate at the boundary
        message = f"embedded Qdrant {operation} failed: {exc}"
        if any(marker in str(exc) for marker in _TRANSIENT_MARKERS):
            raise TransientStoreError(message) from exc
        raise StoreError(message) from exc


def items_config(dimension: int) -> qe.EdgeConfig:
    # float16 halves the dense vectors' memory, and so the cache misses of a search over a large set
    # (measured at 100k items: hybrid query 4.8 -> 3.8 ms). Cosine ranking is unchanged to ~1e-3.
    dense = qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine, datatype=qe.VectorStorageDatatype.Float16)
    # IDF is applied by the engine at query time, over what the shard holds.
    sparse = {name: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf) for name in SPARSE_NAMES}
    return qe.EdgeConfig(vectors={DENSE: dense}, sparse_vectors=sparse)


def registry_config() -> qe.EdgeConfig:
    """A shard of records, not vectors (set definitions, the fingerprint): one constant 1-d vector each."""
    return qe.EdgeConfig(vectors={DENSE: qe.EdgeVectorParams(size=1, distance=qe.Distance.Dot)})


def holds_data(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def holds_points(path: Path) -> bool:
    with translated(f"open of {path}"):
        shard = qe.EdgeShard.load(str(path))
        try:
            records, _ = shard.scroll(qe.ScrollRequest(limit=1, with_payload=False, with_vector=False))
            return bool(records)
        finally:
            shard.close()


def open_shard(path: Path, config: qe.EdgeConfig) -> qe.EdgeShard:
    path.mkdir(parents=True, exist_ok=True)
    with translated(f"open of {path}"):
        if holds_data(path):
            # A shard keeps the configuration it was created with (e.g. float32 vectors from before
            # float16 became the default): the engine refuses to load it under a different one.
            return qe.EdgeShard.load(str(path))
        return qe.EdgeShard.create(str(path), config)


class EarlierShard:
    """The items shard of an earlier layout, read by a migration (``stores.migration.EarlierLayout``)."""

    def __init__(self, path: Path, dimension: int) -> None:
        self._path = path
        # A shard of an earlier layout loads with the configuration it was made with; this one is for an empty directory.
        config = qe.EdgeConfig(vectors={DENSE: qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine)})
        self._shard = open_shard(path, config)

    @property
    def name(self) -> str:
        return self._path.name

    def keys(self) -> Iterator[tuple[str, dict[str, Any]]]:
        offset: Any = None
        while True:
            request = qe.ScrollRequest(
                offset=offset, limit=SCROLL_PAGE, with_payload=list(KEY_FIELDS), with_vector=False
            )
            with translated("migration scroll"):
                records, offset = self._shard.scroll(request)
            yield from ((str(r.id), r.payload) for r in records if r.payload is not None)
            if offset is None:
                return

    def points(self, ids: Sequence[str]) -> dict[str, tuple[dict[str, Any], list[float] | None]]:
        with translated("migration read"):
            records = self._shard.retrieve(list(ids), with_payload=True, with_vector=[DENSE])
        found: dict[str, tuple[dict[str, Any], list[float] | None]] = {}
        for r in records:
            payload, vectors = r.payload, r.vector  # each read of these converts the engine's record anew
            dense = vectors.get(DENSE) if isinstance(vectors, dict) else None
            if payload is not None:
                found[str(r.id)] = (dict(payload), cast(list[float], dense) if isinstance(dense, list) else None)
        return found

    def close(self) -> None:
        with translated("close"):
            self._shard.close()
