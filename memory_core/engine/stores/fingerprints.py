"""Which embedder filled a store: its fingerprint, recorded once beside the items and checked on every open.

Vectors of two models (or of two revisions, poolings or prefixes of one) must never meet in one index or one
search, even when their dimensions agree: the store keeps the fingerprint of the embedder that filled it in
a small metadata collection of its own (one reserved point; a shard on the embedded engine, a collection on a
server: both engines have these, where collection metadata is not in both), and a worker whose embedder
differs refuses to start.

A store filled before stores recorded a fingerprint gets one on its first open, decided by the name of the
collection that holds its items (one collection per model name): all-MiniLM-L6-v2's, or the test embedder's.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from pydantic import ValidationError

from memory_core.core.errors import ConfigurationError, StoreError
from memory_core.engine.embedders.base import EmbedderFingerprint

logger = logging.getLogger(__name__)

META_SUFFIX = "__meta"
"""The metadata collection of a store is named ``<prefix>__meta`` (``<collection>__meta`` for a store opened
alone); a model's slug never holds ``__``, so no items collection is ever named so."""

FINGERPRINT_POINT = str(uuid.uuid5(uuid.UUID("0d6f3e0a-5b8e-4f0c-9a57-1f2e8c4b7d21"), "embedder fingerprint"))
"""The reserved point id of the fingerprint record in the metadata collection (fixed forever)."""


class FingerprintRecording(Protocol):
    """What ``settle_fingerprint`` needs of an adapter while it opens."""

    @property
    def location(self) -> str: ...

    def recorded_fingerprint(self) -> EmbedderFingerprint | None: ...

    def record_fingerprint(self, fingerprint: EmbedderFingerprint) -> None: ...

    def holds_collection(self, name: str) -> bool: ...


def fingerprint_payload(fingerprint: EmbedderFingerprint, collection: str) -> dict[str, Any]:
    """The stored record: the fingerprint, the items collection it was recorded for, and when."""
    return {"fingerprint": fingerprint.model_dump(mode="json"), "collection": collection, "recorded_at": time.time()}


def fingerprint_from_payload(payload: Mapping[str, Any] | None, where: str) -> EmbedderFingerprint | None:
    """The fingerprint of a stored record (None: none recorded). A record that does not parse fails the open,
    typed: guessing would risk mixing two models' vectors."""
    if not payload:
        return None
    try:
        return EmbedderFingerprint.model_validate(payload.get("fingerprint"))
    except ValidationError as exc:
        raise StoreError(
            f"the embedder fingerprint recorded in {where} is unreadable ({exc.error_count()} errors, first: "
            f"{exc.errors()[0]['msg']}); expected the record memory-core writes there"
        ) from None


def mismatch_message(recorded: EmbedderFingerprint, wanted: EmbedderFingerprint, location: str) -> str:
    """One line: both fingerprints, and what to do."""
    return (
        f"the store at {location} holds vectors of {recorded.describe()}, but this worker's embedder is "
        f"{wanted.describe()}, whose vectors cannot be compared with them; set MEMORY_EMBEDDER__MODEL back to "
        f"{recorded.spec!r}, or re-embed the store with `memory-core reindex --to {wanted.spec}` "
        "(coming in a later release)"
    )


def settle_fingerprint(
    store: FingerprintRecording,
    wanted: EmbedderFingerprint | None,
    legacy: Mapping[str, Callable[[], EmbedderFingerprint]],
) -> None:
    """Records a fingerprint in a store that has none, then refuses an embedder that differs from it.

    Called by an adapter before it opens or creates its items collection, so a refused worker leaves
    nothing behind. ``wanted``: the fingerprint of the worker's embedder (None: no check, as in the
    contract tests). ``legacy``: collection name -> the fingerprint of what filled it before fingerprints
    were recorded, in order of precedence; the first collection found decides.

    Raises:
        ConfigurationError: the store holds vectors of another embedder (one line naming both).
    """
    recorded = store.recorded_fingerprint()
    if recorded is None:
        filled_by = next((fingerprint for name, fingerprint in legacy.items() if store.holds_collection(name)), None)
        first = filled_by() if filled_by is not None else wanted
        if first is None:
            return
        store.record_fingerprint(first)
        # Read back: on a server another worker may have recorded its own at the same moment; the last wins.
        recorded = store.recorded_fingerprint()
        if filled_by is not None:
            logger.warning("store at %s had no embedder fingerprint; recorded %s", store.location, first.describe())
    if wanted is not None and recorded is not None and recorded.id != wanted.id:
        raise ConfigurationError(mismatch_message(recorded, wanted, store.location))
