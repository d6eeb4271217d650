"""Which embedder filled a store: its fingerprint, recorded once beside the items and checked on every open.

Vectors of two models (or of two revisions, poolings or prefixes of one) must never meet in one index or one
search, even when their dimensions agree: the store keeps the fingerprint of the embedder that filled it in
a small metadata collection of its own (one reserved point; a shard on the embedded engine, a collection on a
server: both engines have these, where collection metadata is not in both), and a worker whose embedder
differs refuses to start.

A store filled before stores recorded a fingerprint gets one on its first open, decided by the name of the
collection that holds its items (one collection per model name): all-MiniLM-L6-v2's, or the test embedder's.
Any other store that holds data but no record (data in another collection too, for one of those) lost its
record (a new store records one before it creates its items collection): which model made its vectors is
unknown, so it is refused until the record is restored.
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

_RECORDS = uuid.UUID("0d6f3e0a-5b8e-4f0c-9a57-1f2e8c4b7d21")  # fixed forever: record names map to point ids


def record_point(name: str) -> str:
    """The reserved point id of the metadata record ``name`` (fixed forever for a name)."""
    return str(uuid.uuid5(_RECORDS, name))


FINGERPRINT_RECORD = "embedder fingerprint"
FINGERPRINT_POINT = record_point(FINGERPRINT_RECORD)
"""The reserved point id of the fingerprint record in the metadata collection."""
REINDEX_RECORD = "reindex"
"""The record of the store's reindex, if one was started (``memory_core.engine.reindex``)."""


class FingerprintRecording(Protocol):
    """What ``settle_fingerprint`` needs of an adapter while it opens."""

    @property
    def location(self) -> str: ...

    def recorded_fingerprint(self) -> EmbedderFingerprint | None: ...

    def record_fingerprint(self, fingerprint: EmbedderFingerprint) -> None: ...

    def holds_collection(self, name: str) -> bool: ...

    def filled_collections(self) -> list[str]:
        """The store's collections (items or set definitions, not its metadata) that hold at least one point."""
        ...

    def read_record(self, name: str) -> dict[str, Any] | None: ...

    def write_record(self, name: str, payload: Mapping[str, Any]) -> None: ...


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
        "(run by workers that keep the current setting)"
    )


def settle_fingerprint(
    store: FingerprintRecording,
    wanted: EmbedderFingerprint | None,
    legacy: Mapping[str, Callable[[], EmbedderFingerprint]],
) -> str | None:
    """Records a fingerprint in a store that has none, switches to a completed reindex, then refuses an
    embedder that differs from what the store holds. Returns the items collection to open when the record
    names one (a reindexed store's collection is not always the model's default name), else None.

    Called by an adapter before it opens or creates its items collection, so a refused worker leaves
    nothing behind. ``wanted``: the fingerprint of the worker's embedder (None: no check, as in the
    contract tests). ``legacy``: collection name -> the fingerprint of what filled it before fingerprints
    were recorded, in order of precedence; the first collection found decides.

    A worker started with the target embedder of a reindex that completed makes the switch: the record
    names the new fingerprint and collection in one write, so every later open agrees.

    Raises:
        ConfigurationError: the store holds vectors of another embedder (one line naming both), or a reindex
            to this worker's embedder has not completed yet.
        StoreError: the store has no fingerprint record, yet holds data outside the ``legacy`` collections.
    """
    recorded = store.recorded_fingerprint()
    if recorded is None:
        filled_by = next((fingerprint for name, fingerprint in legacy.items() if store.holds_collection(name)), None)
        if wanted is not None:
            _refuse_unrecorded(store, legacy)
        first = filled_by() if filled_by is not None else wanted
        if first is None:
            return None
        if filled_by is None:
            store.record_fingerprint(first)  # a new store: its items go in this embedder's collection
        else:
            # Filled by another model than this worker's: its collection is that model's default name (which
            # the opener does not know here), so the record names none.
            store.write_record(FINGERPRINT_RECORD, fingerprint_payload(first, ""))
        # Read back: on a server another worker may have recorded its own at the same moment; the last wins.
        recorded = store.recorded_fingerprint()
        if filled_by is not None:
            logger.warning("store at %s had no embedder fingerprint; recorded %s", store.location, first.describe())
    if wanted is not None and recorded is not None and recorded.id != wanted.id:
        return _switch_to_reindexed(store, recorded, wanted)
    held = store.read_record(FINGERPRINT_RECORD) or {}
    collection = held.get("collection")
    return collection if isinstance(collection, str) and collection else None


def _refuse_unrecorded(store: FingerprintRecording, legacy: Mapping[str, Callable[[], EmbedderFingerprint]]) -> None:
    """Refuses a store that lost its fingerprint record: taking it over would hide (or mix with) its vectors.
    Data in ``legacy`` collections is a store from before fingerprints, which held nothing else."""
    filled = [name for name in store.filled_collections() if name.removesuffix("__sets") not in legacy]
    if filled:
        shown = ", ".join(repr(name) for name in filled[:4]) + (
            f" and {len(filled) - 4} more" if len(filled) > 4 else ""
        )
        raise StoreError(
            f"the store at {store.location} holds data ({shown}) but no embedder fingerprint record, so which "
            "model made its vectors is unknown; nothing was changed: restore the store from a backup "
            "(`memory-core restore LABEL --yes`, workers stopped), or record the model that filled it as the "
            "embedders guide says ('A store without its fingerprint record')"
        )


def _switch_to_reindexed(
    store: FingerprintRecording, recorded: EmbedderFingerprint, wanted: EmbedderFingerprint
) -> str:
    reindex = store.read_record(REINDEX_RECORD) or {}
    collection = reindex.get("collection")
    if reindex.get("target_id") != wanted.id or reindex.get("state") == "aborted" or not isinstance(collection, str):
        raise ConfigurationError(mismatch_message(recorded, wanted, store.location))
    if reindex.get("state") != "complete":
        raise ConfigurationError(
            f"the store at {store.location} is being re-embedded for {wanted.describe()}, but the reindex is "
            f"{reindex.get('state', 'unknown')}, not complete; keep MEMORY_EMBEDDER__MODEL={recorded.spec!r} until "
            "`memory-core reindex --status` says complete, then restart the workers with the new setting"
        )
    if not store.holds_collection(collection):  # never switch to an empty store
        raise ConfigurationError(
            f"the store at {store.location} finished a reindex for {wanted.describe()} into collection "
            f"{collection!r}, which is gone; keep MEMORY_EMBEDDER__MODEL={recorded.spec!r}, or start the reindex again"
        )
    store.write_record(FINGERPRINT_RECORD, fingerprint_payload(wanted, collection))
    store.write_record(REINDEX_RECORD, {**reindex, "state": "switched", "switched_at": time.time()})
    logger.warning(
        "store at %s switched to the re-embedded collection %s (%s); the previous collection %s is kept until "
        "`memory-core reindex --drop-old`",
        store.location,
        collection,
        wanted.describe(),
        reindex.get("source_collection"),
    )
    return collection
