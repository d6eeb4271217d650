"""qdrant-client's errors as ours, and the items collection of an earlier layout that a migration reads."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from memory_core.core.errors import StoreError, TransientStoreError
from memory_core.engine.stores.migration import KEY_FIELDS

DENSE = "dense"
SCROLL_PAGE = 1_000


@contextmanager
def translated(operation: str) -> Iterator[None]:
    """Raises what qdrant-client raises inside as ``StoreError`` (``TransientStoreError`` when retrying may help)."""
    try:
        yield
    except (ResponseHandlingException, ConnectionError, TimeoutError) as exc:
        raise TransientStoreError(f"Qdrant {operation} failed: {exc}") from exc
    except UnexpectedResponse as exc:
        retryable = exc.status_code in {429, 502, 503, 504}
        error = TransientStoreError if retryable else StoreError
        raise error(f"Qdrant {operation} failed with HTTP {exc.status_code}: {exc.reason_phrase}") from exc
    except (ValueError, RuntimeError) as exc:  # local mode raises these for bad requests
        raise StoreError(f"Qdrant {operation} failed: {exc}") from exc


class EarlierCollection:
    """The items collection of an earlier layout, read by a migration (``stores.migration.EarlierLayout``)."""

    def __init__(self, client: QdrantClient, name: str) -> None:
        self._client = client
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def keys(self) -> Iterator[tuple[str, dict[str, Any]]]:
        offset: qm.ExtendedPointId | None = None
        while True:
            with translated("migration scroll"):
                records, offset = self._client.scroll(
                    self._name, limit=SCROLL_PAGE, offset=offset, with_payload=list(KEY_FIELDS), with_vectors=False
                )
            yield from ((str(r.id), r.payload) for r in records if r.payload is not None)
            if offset is None:
                return

    def points(self, ids: Sequence[str]) -> dict[str, tuple[dict[str, Any], list[float] | None]]:
        with translated("migration read"):
            records = self._client.retrieve(self._name, ids=list(ids), with_payload=True, with_vectors=[DENSE])
        found: dict[str, tuple[dict[str, Any], list[float] | None]] = {}
        for r in records:
            dense = r.vector.get(DENSE) if isinstance(r.vector, dict) else None
            if r.payload is not None:
                found[str(r.id)] = (dict(r.payload), cast(list[float], dense) if isinstance(dense, list) else None)
        return found
