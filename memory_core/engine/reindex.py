"""Re-embedding a live store for another embedder, blue-green (``memory-core reindex``).

The store keeps serving from its collection (the *source*) while a second collection (the *target*) is filled
with the same points, their dense vectors made anew by the target embedder and their BM25 vectors copied as
they are (they depend on no model). Nothing ever compares vectors of two models: reads use the source until
the workers restart with the new ``MEMORY_EMBEDDER__MODEL``, and the first of them to open the store makes
the switch (``fingerprints.settle_fingerprint``: one write of the fingerprint record names the new collection).

How the copy stays exact while the store is written:

* The point-id space is cut into ``PARTS`` parts; each is copied in batches by ``memory.reindex_batch`` tasks
  (several workers share the work on a Qdrant server). A part's progress (its cursor) is a record in the
  store's metadata collection, written after each batch, so a killed worker's part resumes where it was.
  A Redis lock per part keeps two workers off one part; its expiry bounds how long a killed holder blocks it.
* While the reindex is not aborted, every worker mirrors each write into the target (``MirroringStore``),
  under the same monotonic rules: copies and mirrored writes both land only over older points (``due``), so
  whichever comes second cannot undo the first, a delete's tombstone keeps a late copy out, and no write goes
  back in time in either collection.
* Each part is read twice. The second pass copies what the first could not see: writes a worker made before
  it learned of the reindex (within ``ReindexSettings.refresh``), and a mirror write lost to a kill between
  the source write and its mirror (the redelivered task would write it anyway). The second pass starts no
  sooner than two refresh periods after the start.
* Set definitions are copied at the start and again when the last part is done (and mirrored in between).

When every part has done both passes the reindex is ``complete``: writes are still mirrored until the
workers restart with the target setting. ``abort`` drops the target; ``drop_old`` drops the source once the
workers switched.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis
from pydantic import ValidationError

from memory_core.core.errors import ConfigurationError, InvalidRequestError, MemoryCoreError, StoreError
from memory_core.core.keys import Keys
from memory_core.core.locks import RedisLock
from memory_core.core.messages import REINDEX_PARTS, ReindexRequest, ReindexStatus
from memory_core.core.metrics import REINDEX_POINTS
from memory_core.core.models import MemorySet, Scope
from memory_core.core.settings import EmbedderSettings, ReindexSettings
from memory_core.engine.embedders import Embedder, open_embedder
from memory_core.engine.embedders.base import EmbedderFingerprint, embed_timed
from memory_core.engine.stores.base import ItemRecord, RawPoint, ReindexableStore, VectorStore, due, item_text
from memory_core.engine.stores.fingerprints import REINDEX_RECORD

logger = logging.getLogger(__name__)

PARTS = REINDEX_PARTS
"""Parts of the point-id space copied independently: point ids are UUIDs, so part ``i`` holds the ids whose
first hex digit is ``i``, and uniform ids spread the work evenly."""
MIRRORED_STATES = frozenset({"building", "complete", "switched"})
"""States in which the source's writers mirror into the target (after the switch, only workers not yet
restarted still write the source)."""
SET_LIMIT = 1_000_000
BUSY_DELAY = 0.5
"""Seconds a part's batch waits when this process is already copying one: a worker runs one reindex batch at
a time, so its other threads stay free for the adds and searches it serves (measured in ``ops/bench
--reindex``: with every thread copying, one-item adds waited 20 times longer)."""


def part_bounds(part: int) -> tuple[str, str | None]:
    """The first point id of a part and the first id past it (None for the last)."""
    start = f"{part:x}0000000-0000-0000-0000-000000000000"
    return start, None if part == PARTS - 1 else f"{part + 1:x}0000000-0000-0000-0000-000000000000"


def part_record(part: int) -> str:
    return f"{REINDEX_RECORD} part {part}"


@dataclass
class Target:
    """The collection being filled and the embedder that fills it."""

    collection: str
    store: ReindexableStore
    embedder: Embedder

    def vectors(self, texts: list[str]) -> list[list[float]]:
        return embed_timed(self.embedder, texts) if texts else []


def _copy_due(point: RawPoint, held: tuple[int, bool] | None) -> bool:
    """Whether a source point must be written into the target: ``stores.base.due`` for one point, a tombstone
    as a delete. Decided before embedding, so a point the target already holds costs no model time."""
    stored = {} if held is None else {point.id: held}
    return bool(due(stored, {point.id: int(point.payload["seq"])}, deleting=point.tombstone))


class Reindexer:
    """The worker's half of a reindex: start, batches, status, abort, drop of the old collection, and the target
    that writes are mirrored into. One per worker process; thread-safe."""

    def __init__(
        self,
        *,
        store: VectorStore,
        embedder: Embedder,
        embedder_settings: EmbedderSettings,
        settings: ReindexSettings,
        redis_client: redis.Redis,
        keys: Keys,
        collection_for: Callable[[str], str],
        open_target_embedder: Callable[[EmbedderSettings], Embedder] = open_embedder,
    ) -> None:
        """``collection_for``: the items collection name of a model name (``stores.collection_name``)."""
        self._store = store
        self._embedder = embedder
        self._embedder_settings = embedder_settings
        self._settings = settings
        self._redis = redis_client
        self._keys = keys
        self._collection_for = collection_for
        self._open_target_embedder = open_target_embedder
        self._lock = threading.RLock()
        self._copying = threading.Lock()  # one batch at a time in this process
        self._target: Target | None = None
        self._checked_at = float("-inf")

    @property
    def store(self) -> ReindexableStore:
        """The serving store, as a reindex needs it (a store without the methods cannot be reindexed)."""
        if not callable(getattr(self._store, "open_sibling", None)):
            raise ConfigurationError(f"the store at {self._store.location} cannot be reindexed (no second collection)")
        return cast(ReindexableStore, self._store)

    # -- the operator's calls --------------------------------------------------------------------------------

    def handle(self, request: ReindexRequest) -> tuple[ReindexStatus, list[int]]:
        """Runs one operator action; returns the status and the parts whose batches should be enqueued now."""
        if request.action == "start":
            return self.start(request)
        if request.action == "abort":
            return self.abort(), []
        if request.action == "drop_old":
            return self.drop_old(), []
        status, stalled = self.status()
        return status, stalled

    def start(self, request: ReindexRequest) -> tuple[ReindexStatus, list[int]]:
        """Creates the target collection and records the reindex; every part is then to be enqueued."""
        store = self.store
        with self._lock:
            record = store.read_record(REINDEX_RECORD) or {}
            target_settings = self._target_settings(request)
            if record.get("state") in ("building", "complete") and record.get("source_collection") == store.collection:
                if record.get("embedder") == _embedder_fields(target_settings):
                    return self.status()  # started already: a repeated command follows it
                raise InvalidRequestError(
                    f"a reindex to {record.get('target_spec')!r} is {record['state']} on this store; run "
                    "`memory-core reindex --abort` first to start another"
                )
            embedder = self._open_embedder(target_settings)
            current = self._embedder.fingerprint
            if embedder.fingerprint.id == current.id:
                raise InvalidRequestError(
                    f"the store already holds vectors of {current.describe()}: there is nothing to reindex"
                )
            collection = self._collection_for(embedder.model_name)
            if collection == store.collection:  # same model name, other settings (a revision, a dimension)
                collection = f"{collection}_{embedder.fingerprint.id[:8]}"
            self._close_target()
            store.drop_collection(collection)  # what an earlier aborted or failed start left
            target = Target(collection, store.open_sibling(collection, embedder.dimension), embedder)
            _copy_sets(store, target.store)
            started = time.time()
            record = {
                "state": "building",
                "started_at": started,
                "source": current.model_dump(mode="json"),
                "source_collection": store.collection,
                "target": embedder.fingerprint.model_dump(mode="json"),
                "target_id": embedder.fingerprint.id,
                "target_spec": embedder.fingerprint.spec,
                "embedder": _embedder_fields(target_settings),
                "collection": collection,
                "dimension": embedder.dimension,
                "total": store.point_count(),
            }
            store.write_record(REINDEX_RECORD, record)
            self._target, self._checked_at = target, time.monotonic()
        logger.warning(
            "reindex started: %s -> %s, into collection %s (%d points)",
            current.describe(),
            embedder.fingerprint.describe(),
            collection,
            record["total"],
        )
        status, _ = self.status()
        return status, list(range(PARTS))

    def status(self) -> tuple[ReindexStatus, list[int]]:
        """Where the reindex stands, and the parts that made no progress for a lock's lifetime (a killed
        worker's, or a chain of batches that broke): enqueueing them again resumes the work."""
        store = self.store
        record = store.read_record(REINDEX_RECORD)
        if record is None:
            return ReindexStatus(state="none"), []
        parts = [self._part(store, record, part) for part in range(PARTS)]
        now = time.time()
        stalled = [
            part
            for part, progress in enumerate(parts)
            if record.get("state") == "building"
            and not progress.get("done")
            and now - float(progress.get("updated_at") or record["started_at"]) > self._settings.lock_ttl
        ]
        return (
            ReindexStatus(
                state=record["state"],
                source=_described(record.get("source")),
                target=_described(record.get("target")),
                target_spec=str(record.get("target_spec", "")),
                source_collection=str(record.get("source_collection", "")),
                collection=str(record.get("collection", "")),
                total=int(record.get("total", 0)),
                scanned=sum(int(p.get("scanned", 0)) for p in parts),
                copied=sum(int(p.get("copied", 0)) for p in parts),
                parts_done=sum(1 for p in parts if p.get("done")),
                parts=PARTS,
                started_at=record.get("started_at"),
                completed_at=record.get("completed_at"),
                source_dropped=bool(record.get("source_dropped")),
            ),
            stalled,
        )

    def abort(self) -> ReindexStatus:
        """Stops the reindex and drops the target collection; the store goes on as before."""
        store = self.store
        with self._lock:
            record = store.read_record(REINDEX_RECORD)
            if record is None or record.get("state") not in ("building", "complete"):
                state = "none" if record is None else record.get("state")
                raise InvalidRequestError(f"no reindex to abort: the store's reindex is {state}")
            if record.get("source_collection") != store.collection:
                raise InvalidRequestError(
                    f"this worker serves collection {store.collection!r}, not the reindex's source "
                    f"{record.get('source_collection')!r}; abort from a worker that runs the old setting"
                )
            store.write_record(REINDEX_RECORD, {**record, "state": "aborted", "aborted_at": time.time()})
            self._close_target()
            store.drop_collection(str(record["collection"]))
        logger.warning("reindex to %s aborted; collection %s dropped", record.get("target_spec"), record["collection"])
        return self.status()[0]

    def drop_old(self) -> ReindexStatus:
        """Drops the collection the store was re-embedded from, once the workers switched to the new one."""
        store = self.store
        with self._lock:
            record = store.read_record(REINDEX_RECORD)
            if record is None or record.get("state") != "switched" or store.collection != record.get("collection"):
                state = "none" if record is None else record.get("state")
                raise InvalidRequestError(
                    f"the old collection can be dropped once the workers run the new embedder (the reindex is "
                    f"{state}; restart the workers with MEMORY_EMBEDDER__MODEL set to the target first)"
                )
            if not record.get("source_dropped"):
                store.drop_collection(str(record["source_collection"]))
                store.write_record(REINDEX_RECORD, {**record, "source_dropped": True})
        return self.status()[0]

    # -- the batches -----------------------------------------------------------------------------------------

    def run_batch(self, part: int) -> float | None:
        """Copies the next batch of ``part``; returns the seconds to wait before its next batch, or None when
        there is nothing more to do for it (done, not building, or another worker holds it). A process copies
        one batch at a time: a part whose turn comes while another is copied here waits ``BUSY_DELAY``."""
        if not 0 <= part < PARTS:
            raise InvalidRequestError(f"reindex part must be 0 to {PARTS - 1}, got {part!r}")
        store = self.store
        if not self._copying.acquire(blocking=False):
            return BUSY_DELAY
        try:
            return self._run_batch(store, part)
        finally:
            self._copying.release()

    def _run_batch(self, store: ReindexableStore, part: int) -> float | None:
        lock = RedisLock(self._redis, self._keys.sweep_lock(f"reindex-part-{part}"), self._settings.lock_ttl)
        if not lock.acquire():
            return None
        try:
            record = store.read_record(REINDEX_RECORD)
            if record is None or record.get("state") != "building" or record["source_collection"] != store.collection:
                return None
            target = self.target()
            if target is None:
                return None
            progress = self._part(store, record, part)
            if progress.get("done"):
                return None
            return self._copy_batch(store, target, record, part, progress)
        finally:
            lock.release()

    def _copy_batch(
        self, store: ReindexableStore, target: Target, record: dict[str, Any], part: int, progress: dict[str, Any]
    ) -> float | None:
        second_pass = progress.get("pass", 1) == 2
        not_before = float(record["started_at"]) + 2 * self._settings.refresh
        if second_pass and progress.get("cursor") is None and time.time() < not_before:
            return not_before - time.time()  # let every worker learn to mirror before the check pass reads
        start, stop = part_bounds(part)
        points, following = store.scan(progress.get("cursor") or start, stop, self._settings.batch_size)
        held = target.store.versions([p.id for p in points])
        to_copy = [p for p in points if _copy_due(p, held.get(p.id))]
        texts = [item_text(p.payload["value"]) for p in to_copy if not p.tombstone]
        vectors = iter(target.vectors(texts))
        copied = target.store.copy_in([(p, None if p.tombstone else next(vectors)) for p in to_copy])
        REINDEX_POINTS.labels("scanned").inc(len(points))
        REINDEX_POINTS.labels("copied").inc(copied)
        progress = {
            **progress,
            "cursor": following,
            "scanned": int(progress.get("scanned", 0)) + len(points),
            "copied": int(progress.get("copied", 0)) + copied,
            "updated_at": time.time(),
        }
        if following is None:
            progress = {**progress, "pass": 2} if not second_pass else {**progress, "done": True}
        store.write_record(part_record(part), progress)
        if progress.get("done"):
            self._complete_if_done(store, target)
            return None
        return 0.0

    def _complete_if_done(self, store: ReindexableStore, target: Target) -> None:
        with self._lock:
            record = store.read_record(REINDEX_RECORD)
            if record is None or record.get("state") != "building":
                return
            if not all(self._part(store, record, part).get("done") for part in range(PARTS)):
                return
            _copy_sets(store, target.store, prune=True)
            store.write_record(REINDEX_RECORD, {**record, "state": "complete", "completed_at": time.time()})
        logger.warning(
            "reindex to %s complete: restart the workers with MEMORY_EMBEDDER__MODEL=%s",
            record.get("target_spec"),
            record.get("target_spec"),
        )

    def _part(self, store: ReindexableStore, record: Mapping[str, Any], part: int) -> dict[str, Any]:
        progress = store.read_record(part_record(part)) or {}
        # A part record of an earlier reindex counts for nothing in this one.
        return (
            progress if progress.get("started_at") == record.get("started_at") else {"started_at": record["started_at"]}
        )

    # -- the mirror ------------------------------------------------------------------------------------------

    def target(self) -> Target | None:
        """The collection writes must be mirrored into (and the reindex copies into), or None; what the store
        records is read again at most every ``refresh`` seconds."""
        with self._lock:
            if time.monotonic() - self._checked_at < self._settings.refresh:
                return self._target
            record = self.store.read_record(REINDEX_RECORD)
            self._checked_at = time.monotonic()
            wanted = (
                record is not None
                and record.get("state") in MIRRORED_STATES
                and record.get("source_collection") == self._store_collection()
            )
            if not wanted or record is None:
                self._close_target()
                return None
            if self._target is None or self._target.collection != record["collection"]:
                self._close_target()
                self._target = self._reopen(record)
            return self._target

    def _store_collection(self) -> str | None:
        return getattr(self._store, "collection", None)

    def _reopen(self, record: Mapping[str, Any]) -> Target:
        """The target of a reindex another process started (or this one, before a restart)."""
        settings = self._embedder_settings.model_copy(update=record.get("embedder") or {})
        embedder = self._open_embedder(settings)
        if embedder.fingerprint.id != record.get("target_id"):
            raise StoreError(
                f"this worker's {record.get('target_spec')!r} is {embedder.fingerprint.describe()}, not the "
                f"{_described(record.get('target'))} the reindex started with; give every worker the same model"
            )
        return Target(
            str(record["collection"]), self.store.open_sibling(str(record["collection"]), embedder.dimension), embedder
        )

    def _close_target(self) -> None:
        if self._target is not None:
            self._target.store.close()
            self._target = None

    def close(self) -> None:
        with self._lock:
            self._close_target()

    # -- helpers ---------------------------------------------------------------------------------------------

    def _target_settings(self, request: ReindexRequest) -> EmbedderSettings:
        fields = {
            "model": request.to,
            "path": request.path,
            "base_url": request.base_url,
            "dimensions": request.dimensions,
        }
        try:
            return EmbedderSettings.model_validate({**self._embedder_settings.model_dump(), **fields})
        except ValidationError as exc:
            first = exc.errors()[0]
            raise InvalidRequestError(
                f"reindex target {request.to!r}: {'.'.join(map(str, first['loc']))} {first['msg']}"
            ) from None

    def _open_embedder(self, settings: EmbedderSettings) -> Embedder:
        try:
            return self._open_target_embedder(settings)
        except MemoryCoreError:
            raise
        except Exception as exc:  # a provider's own failure to load: say which target
            raise ConfigurationError(f"cannot load the reindex target {settings.model!r}: {exc}") from exc


def _embedder_fields(settings: EmbedderSettings) -> dict[str, Any]:
    """What a reindex records of its target's settings, so every worker builds the same embedder (no secret)."""
    return {
        "model": settings.model,
        "path": None if settings.path is None else str(settings.path),
        "base_url": settings.base_url,
        "dimensions": settings.dimensions,
    }


def _described(fingerprint: object) -> str:
    try:
        return EmbedderFingerprint.model_validate(fingerprint).describe()
    except ValidationError:
        return ""


def _copy_sets(source: VectorStore, target: VectorStore, *, prune: bool = False) -> None:
    """The source's set definitions into the target (``prune``: and none the source no longer has)."""
    wanted = {(namespace, key, d.name): d for namespace, key, d in source.list_sets(SET_LIMIT)}
    for (namespace, key, _), definition in wanted.items():
        target.put_set(namespace, key, definition)
    if prune:
        for namespace, key, definition in target.list_sets(SET_LIMIT):
            if (namespace, key, definition.name) not in wanted:
                target.delete_set(namespace, key, definition.name)


class MirroringStore:
    """The serving store, whose writes are mirrored into a reindex's target while one runs.

    The source is written first: a task killed in between is redelivered and writes both again (every write
    is idempotent), and the reindex's second pass copies what was missed. Reads go to the source only.
    """

    def __init__(self, inner: VectorStore, reindexer: Reindexer) -> None:
        self._inner = inner
        self._reindexer = reindexer

    @property
    def location(self) -> str:
        return self._inner.location

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def upsert(self, scope: Scope, records: Sequence[ItemRecord], *, context_window: int = 0) -> None:
        self._inner.upsert(scope, records, context_window=context_window)
        target = self._reindexer.target()
        if target is not None and records:
            vectors = target.vectors([str(r.item.value) for r in records])
            mirrored = [ItemRecord(item=r.item, seq=r.seq, vector=v) for r, v in zip(records, vectors, strict=True)]
            target.store.upsert(scope, mirrored, context_window=context_window)

    def delete(self, scope: Scope, versions: Mapping[str, int]) -> None:
        self._inner.delete(scope, versions)
        if (target := self._reindexer.target()) is not None:
            target.store.delete(scope, versions)

    def set_fields(
        self, scope: Scope, item_ids: Sequence[str], fields: Mapping[str, Any], *, seq: int | None = None
    ) -> None:
        self._inner.set_fields(scope, item_ids, fields, seq=seq)
        if (target := self._reindexer.target()) is not None:
            target.store.set_fields(scope, item_ids, fields, seq=seq)

    def put_set(self, namespace: str, key: str, definition: MemorySet) -> None:
        self._inner.put_set(namespace, key, definition)
        if (target := self._reindexer.target()) is not None:
            target.store.put_set(namespace, key, definition)

    def delete_set(self, namespace: str, key: str, set_name: str) -> bool:
        deleted = self._inner.delete_set(namespace, key, set_name)
        if (target := self._reindexer.target()) is not None:
            target.store.delete_set(namespace, key, set_name)
        return deleted

    def forget(self, namespace: str, key: str | None) -> tuple[int, list[str]]:
        forgotten = self._inner.forget(namespace, key)
        if (target := self._reindexer.target()) is not None:
            target.store.forget(namespace, key)
        return forgotten

    def delete_expired(self, now: float, limit: int) -> int:
        deleted = self._inner.delete_expired(now, limit)
        if (target := self._reindexer.target()) is not None:
            target.store.delete_expired(now, limit)
        return deleted

    def close(self) -> None:
        self._reindexer.close()
        self._inner.close()


def mirroring(store: VectorStore, reindexer: Reindexer) -> VectorStore:
    """``store``, its writes mirrored into a running reindex's target."""
    return cast(VectorStore, MirroringStore(store, reindexer))
