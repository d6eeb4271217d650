"""The worker's half of a reindex (``Reindexer``): start, batches, status, abort, the switch's catch-up."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import redis
from pydantic import ValidationError

from memory_core.core.coordination import Coordinator
from memory_core.core.errors import (
    ConfigurationError,
    EmbedderError,
    InvalidRequestError,
    MemoryCoreError,
    StoreError,
    TransientStoreError,
)
from memory_core.core.keys import Keys
from memory_core.core.locks import RedisLock
from memory_core.core.messages import TARGET_FIELDS, ReindexRequest, ReindexStatus
from memory_core.core.metrics import REINDEX_POINTS
from memory_core.core.models import Scope
from memory_core.core.settings import EmbedderSettings, ReindexSettings
from memory_core.engine.embedders import Embedder, open_embedder
from memory_core.engine.embedders.base import EmbedderFingerprint
from memory_core.engine.reindex.repairs import (
    OWED,
    PARTS,
    Target,
    comparable_fields,
    part_bounds,
    part_record,
    plan_repairs,
    scope_of,
)
from memory_core.engine.stores.base import (
    ReindexableStore,
    VectorStore,
    item_text,
)
from memory_core.engine.stores.fingerprints import REINDEX_RECORD

logger = logging.getLogger(__name__)

MIRRORED_STATES = frozenset({"building", "complete", "switched"})
"""States in which the source's writers mirror into the target (after the switch, only workers not yet
restarted still write the source)."""
SET_LIMIT = 1_000_000
BUSY_DELAY = 0.5
"""Seconds a part's batch waits when this process is already copying one: a worker runs one reindex batch at
a time, so its other threads stay free for the adds and searches it serves (measured in ``ops/bench
--reindex``: with every thread copying, one-item adds waited 20 times longer)."""
OWED_POLL = 2.0
"""Seconds between two looks for owed copies when none was found while the reindex builds (once complete, the
catch-up stops when nothing is owed, and ``status`` or beat's kick sends it on when more is)."""
RECONCILE_ROUNDS = 5
"""Times a batch reads both collections and repairs before it gives up for now: each round after the first
only sees points changed while the previous one embedded."""


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
                recorded = record.get("embedder") or {}
                bare = all(getattr(request, name) is None for name in TARGET_FIELDS if name != "to")
                if recorded == _embedder_fields(target_settings) or (bare and recorded.get("model") == request.to):
                    return self.status()  # started already: a repeated command (with or without its flags) follows it
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
        return status, list(range(PARTS + 1))

    def status(self) -> tuple[ReindexStatus, list[int]]:
        """Where the reindex stands, and the parts that made no progress for a lock's lifetime (a killed
        worker's, or a chain of batches that broke), and the owed catch-up once writes came after its chain
        ended (complete, owed nothing): enqueueing them again resumes the work. A part is handed out again at
        most once a lock's lifetime, however often the status is asked."""
        store = self.store
        record = store.read_record(REINDEX_RECORD)
        if record is None:
            return ReindexStatus(state="none"), []
        parts = [self._part(store, record, part) for part in range(PARTS + 1)]
        now = time.time()
        building = record.get("state") == "building"
        running = record.get("state") in ("building", "complete") and record.get("source_collection") == (
            self._store_collection()
        )
        target = self.target() if running else None
        owed = 0 if target is None else target.store.owed_count()
        stalled = [
            part
            for part, progress in enumerate(parts)
            if running
            and ((part == OWED and (building or owed)) or (building and part != OWED and not progress.get("done")))
            and (
                now - float(progress.get("updated_at") or record["started_at"]) > self._settings.lock_ttl
                or (part == OWED and owed and progress.get("idle"))  # its chain ended, and writes came since
            )
            and self._redis.set(self._keys.sweep_lock(f"reindex-kick-{part}"), "1", nx=True, ex=self._settings.lock_ttl)
        ]
        last_success = max((float(p["succeeded_at"]) for p in parts if p.get("succeeded_at")), default=None)
        # A part's error stands until that part runs again, which may be a backoff later (or never, for the
        # owed catch-up once the copy parts took what was owed): a later batch the endpoint answered, in any
        # part, proves it answers again, so only errors recorded since then say it is unreachable.
        failing = [
            p
            for p in parts
            if p.get("error") and (last_success is None or float(p.get("updated_at") or 0) > last_success)
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
                parts_done=sum(1 for p in parts[:PARTS] if p.get("done")),
                parts=PARTS,
                started_at=record.get("started_at"),
                completed_at=record.get("completed_at"),
                source_dropped=bool(record.get("source_dropped")),
                owed=owed,
                target_error=str(failing[-1]["error"]) if failing else "",
                target_error_since=min(float(p["error_since"]) for p in failing) if failing else None,
                last_success_at=last_success,
                restart=restart_settings(record),
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
                if state == "aborted":
                    raise InvalidRequestError(
                        "the reindex was aborted: its new collection is gone and the store serves the old one, "
                        "which is the only copy; there is nothing to drop"
                    )
                raise InvalidRequestError(
                    f"the old collection can be dropped once the workers run the new embedder (the reindex is "
                    f"{state}; restart the workers with the target's settings first: `memory-core reindex "
                    "--status` prints them)"
                )
            if store.owed_count():
                raise InvalidRequestError(
                    f"the new collection is still owed {store.owed_count()} writes from the old one; restart a "
                    "worker with the new embedder (it copies them before it serves), then drop the old collection"
                )
            if not record.get("source_dropped"):
                store.drop_collection(str(record["source_collection"]))
                store.write_record(REINDEX_RECORD, {**record, "source_dropped": True})
        return self.status()[0]

    # -- the batches -----------------------------------------------------------------------------------------

    def run_batch(self, part: int) -> float | None:
        """Copies the next batch of ``part`` (``OWED``: catches up owed copies); returns the seconds to wait
        before its next batch, or None when there is nothing more to do for it (done, not running, or another
        worker holds it). A process copies one batch at a time: a part whose turn comes while another is
        copied here waits ``BUSY_DELAY``. A batch the target's endpoint fails is recorded and tried again after
        a backoff; it raises nothing, so no retry or dead letter piles up while the endpoint is down."""
        if not 0 <= part <= OWED:
            raise InvalidRequestError(f"reindex part must be 0 to {OWED}, got {part!r}")
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
            if record is None or record["source_collection"] != store.collection:
                return None
            if record.get("state") not in ("building", "complete") or (part != OWED and record["state"] != "building"):
                return None
            target = self.target()
            if target is None:
                return None
            progress = self._part(store, record, part)
            if progress.get("done"):
                return None
            began = time.monotonic()
            delay: float | None
            try:
                if part == OWED:
                    delay = self._catch_up(store, target, record, progress)
                else:
                    delay = self._copy_batch(store, target, record, part, progress)
            except (EmbedderError, TransientStoreError) as exc:
                return self._failed(store, part, progress, exc)
            if delay == 0.0 and self._settings.duty < 1:
                delay = (time.monotonic() - began) * (1 - self._settings.duty) / self._settings.duty
            return delay
        finally:
            lock.release()

    def _failed(self, store: ReindexableStore, part: int, progress: dict[str, Any], exc: Exception) -> float:
        """Records why a batch failed and when to try it again (exponential backoff, capped)."""
        failures = int(progress.get("failures", 0)) + 1
        now = time.time()
        error = f"{type(exc).__name__}: {exc}"
        store.write_record(
            part_record(part),
            {
                **progress,
                "failures": failures,
                "error": error,
                "error_since": progress.get("error_since") or now,
                "updated_at": now,
            },
        )
        delay = min(self._settings.retry_max, 2.0 ** (failures - 1))
        logger.warning("reindex part %d: the target failed (%s); retrying in %.0f s", part, error, delay)
        return delay

    @staticmethod
    def _succeeded(progress: dict[str, Any], *, reached_target: bool) -> dict[str, Any]:
        """The part's progress after a batch that raised nothing. Only a batch that had the target embed
        something is a success of the endpoint's (``succeeded_at``): one with nothing to embed proves nothing."""
        now = time.time()
        cleared = {k: v for k, v in progress.items() if k not in ("failures", "error", "error_since")}
        return {**cleared, "updated_at": now, **({"succeeded_at": now} if reached_target else {})}

    def _copy_batch(
        self, store: ReindexableStore, target: Target, record: dict[str, Any], part: int, progress: dict[str, Any]
    ) -> float | None:
        second_pass = progress.get("pass", 1) == 2
        not_before = float(record["started_at"]) + 2 * self._settings.refresh
        if second_pass and progress.get("cursor") is None and time.time() < not_before:
            return not_before - time.time()  # let every worker learn to mirror before the check pass reads
        start, stop = part_bounds(part)
        cursor = progress.get("cursor") or start
        points, following = store.scan(cursor, stop, self._settings.batch_size)
        ids = [p.id for p in points]
        if second_pass:  # also what the target holds in the same range: points the source no longer has
            ids += _ids_between(target.store, cursor, following or stop)
        answered = target.answered
        copied = self._reconcile(store, target, ids)  # (it takes each id once)
        REINDEX_POINTS.labels("scanned").inc(len(points))
        REINDEX_POINTS.labels("copied").inc(copied)
        progress = {
            **self._succeeded(progress, reached_target=target.answered > answered),
            "cursor": following,
            "scanned": int(progress.get("scanned", 0)) + len(points),
            "copied": int(progress.get("copied", 0)) + copied,
        }
        if following is None:
            progress = {**progress, "pass": 2} if not second_pass else {**progress, "done": True}
        store.write_record(part_record(part), progress)
        if progress.get("done"):
            self._complete_if_done(store, target)
            return None
        return 0.0

    def _catch_up(
        self, store: ReindexableStore, target: Target, record: dict[str, Any], progress: dict[str, Any]
    ) -> float | None:
        """Copies up to a batch of the writes the target is owed; polls while none is and the reindex builds."""
        owed = target.store.owed(self._settings.batch_size)
        answered = target.answered
        copied = self._reconcile(store, target, owed) if owed else 0
        REINDEX_POINTS.labels("copied").inc(copied)
        # Complete and owed nothing: the chain ends, and says so, so that ``status`` (or beat's kick) sends it on
        # as soon as more is owed rather than a lock's lifetime later.
        idle = not owed and record.get("state") != "building"
        written = {
            **self._succeeded(progress, reached_target=target.answered > answered),
            "copied": int(progress.get("copied", 0)) + copied,
            "idle": idle,
        }
        store.write_record(part_record(OWED), written)
        if owed:
            return 0.0
        if idle:
            return None
        self._complete_if_done(store, target)
        return OWED_POLL

    def _reconcile(self, source: ReindexableStore, target: Target, ids: Sequence[str]) -> int:
        """Makes the target's points ``ids`` agree with the source's (``plan_repairs``), then reads both again
        and repairs what changed meanwhile, until nothing differs; returns how many points were copied.

        Why it is exact: every change to the source reaches the target after it (mirrored, or owed). A change
        made while a round embedded has been mirrored by the time the next round reads, or that round sees it
        in the source: either way the stale copy is repaired (a point erased meanwhile is removed, a field
        changed meanwhile is patched), and a copy never lands over a newer point (``due``)."""
        copied = 0
        pending = list(dict.fromkeys(ids))
        for _ in range(RECONCILE_ROUNDS):
            repairs = plan_repairs(source.raw_points(pending), target.store.raw_points(pending), pending)
            if not repairs.ids:
                return copied
            items = [p for p in repairs.copies if not p.tombstone]
            embedded = target.vectors([item_text(p.payload["value"]) for p in items])
            vectors = {p.id: vector for p, vector in zip(items, embedded, strict=True)}
            copied += target.store.copy_in([(p, vectors.get(p.id)) for p in repairs.copies])
            for point in repairs.patches:
                target.store.set_fields(
                    scope_of(point), [point.payload["item_id"]], comparable_fields(point.payload), seq=point.seq
                )
            target.store.remove_unchanged(repairs.removals)
            pending = repairs.ids
        raise TransientStoreError(f"{len(pending)} points kept changing during {RECONCILE_ROUNDS} reindex copies")

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
            "reindex to %s complete: restart the workers with %s",
            record.get("target_spec"),
            " ".join(restart_settings(record)),
        )

    def _part(self, store: ReindexableStore, record: Mapping[str, Any], part: int) -> dict[str, Any]:
        progress = store.read_record(part_record(part)) or {}
        # A part record of an earlier reindex counts for nothing in this one.
        return (
            progress if progress.get("started_at") == record.get("started_at") else {"started_at": record["started_at"]}
        )

    # -- the switch ------------------------------------------------------------------------------------------

    def settle_switch(self) -> int:
        """After the switch, before this worker serves: catches up the copies the serving collection is still
        owed from the one it was re-embedded from, with this worker's embedder (the target's), and makes every
        search result cached under the old model unreachable (once). Returns how many points were copied.

        Raises ``ConfigurationError`` (the worker refuses to start, in one line) while the endpoint cannot embed
        what is owed: the switch waits; nothing is lost, nor served from a stale copy."""
        try:
            store = self.store
        except ConfigurationError:
            return 0
        record = store.read_record(REINDEX_RECORD)
        if record is None or record.get("state") != "switched" or record.get("collection") != store.collection:
            return 0
        copied = self._copy_owed_after_switch(store, record) if store.owed_count() else 0
        if not record.get("caches_cleared"):
            coordinator = Coordinator(self._redis, self._keys)
            for namespace, key, definition in store.list_sets(SET_LIMIT):
                coordinator.bump(Scope(namespace, key, definition.name))
            store.write_record(REINDEX_RECORD, {**record, "caches_cleared": True})
        return copied

    def _copy_owed_after_switch(self, store: ReindexableStore, record: Mapping[str, Any]) -> int:
        source_dimension = EmbedderFingerprint.model_validate(record["source"]).dimension
        source = store.open_sibling(str(record["source_collection"]), source_dimension)
        copied = 0
        try:
            here = Target(store.collection, store, self._embedder)
            while owed := store.owed(self._settings.batch_size):
                copied += self._reconcile(source, here, owed)
        except (EmbedderError, TransientStoreError) as exc:
            raise ConfigurationError(
                f"the store at {store.location} switched to {record.get('target_spec')!r} with "
                f"{store.owed_count()} writes still to copy into it, and this worker cannot embed them "
                f"({type(exc).__name__}: {exc}); start it again when the endpoint answers (nothing is lost)"
            ) from None
        finally:
            source.close()
        logger.warning("caught up %d writes owed to the switched collection %s", copied, store.collection)
        return copied

    # -- the mirror ------------------------------------------------------------------------------------------

    def target(self, *, fresh: bool = False) -> Target | None:
        """The collection writes must be mirrored into (and the reindex copies into), or None; what the store
        records is read again at most every ``refresh`` seconds (``fresh``: now)."""
        with self._lock:
            if not fresh and time.monotonic() - self._checked_at < self._settings.refresh:
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
            self._target.state = str(record["state"])
            return self._target

    def _store_collection(self) -> str | None:
        return getattr(self._store, "collection", None)

    def _reopen(self, record: Mapping[str, Any]) -> Target:
        """The target of a reindex another process started (or this one, before a restart)."""
        settings = self._with_target_key(self._embedder_settings.model_copy(update=record.get("embedder") or {}))
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
            "roles": request.roles,
            "query_prefix": request.query_prefix,
            "document_prefix": request.document_prefix,
            "query_params": request.query_params,
            "document_params": request.document_params,
        }
        try:
            return self._with_target_key(
                EmbedderSettings.model_validate({**self._embedder_settings.model_dump(), **fields})
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            raise InvalidRequestError(
                f"reindex target {request.to!r}: {'.'.join(map(str, first['loc']))} {first['msg']}"
            ) from None

    def _with_target_key(self, settings: EmbedderSettings) -> EmbedderSettings:
        """The target's settings with ``MEMORY_REINDEX__API_KEY`` as its key, where one is set."""
        if self._settings.api_key is None:
            return settings
        return settings.model_copy(update={"api_key": self._settings.api_key})

    def _open_embedder(self, settings: EmbedderSettings) -> Embedder:
        try:
            return self._open_target_embedder(settings)
        except ConfigurationError as exc:
            # The provider speaks of the worker's own settings; a reindex's target is given otherwise.
            raise ConfigurationError(f"reindex target {settings.model!r}: {_as_target_flags(str(exc))}") from None
        except MemoryCoreError:
            raise
        except Exception as exc:  # a provider's own failure to load: say which target
            raise ConfigurationError(f"cannot load the reindex target {settings.model!r}: {exc}") from exc


def _ids_between(store: ReindexableStore, start: str, stop: str | None) -> list[str]:
    """Every point id the store holds from ``start`` (inclusive) below ``stop``."""
    found: list[str] = []
    cursor: str | None = start
    while cursor is not None:
        points, cursor = store.scan(cursor, stop, 1000)
        found.extend(p.id for p in points)
    return found


TARGET_FLAGS = {
    "MEMORY_EMBEDDER__ROLES": "--roles",
    "MEMORY_EMBEDDER__QUERY_PREFIX": "--query-prefix",
    "MEMORY_EMBEDDER__DOCUMENT_PREFIX": "--document-prefix",
    "MEMORY_EMBEDDER__QUERY_PARAMS": "--query-params",
    "MEMORY_EMBEDDER__DOCUMENT_PARAMS": "--document-params",
    "MEMORY_EMBEDDER__BASE_URL": "--base-url",
    "MEMORY_EMBEDDER__PATH": "--path",
    "MEMORY_EMBEDDER__DIMENSIONS": "--dimensions",
    "MEMORY_EMBEDDER__API_KEY": "MEMORY_REINDEX__API_KEY (on the workers)",
    "MEMORY_EMBEDDER__MODEL": "--to",
}
"""How a reindex's target is given, for each setting a provider's error names (those describe the source)."""


def _as_target_flags(message: str) -> str:
    for setting, flag in TARGET_FLAGS.items():
        message = message.replace(setting, flag)
    return message


def _embedder_fields(settings: EmbedderSettings) -> dict[str, Any]:
    """What a reindex records of its target's settings, so every worker builds the same embedder (no secret)."""
    return {
        "model": settings.model,
        "path": None if settings.path is None else str(settings.path),
        "base_url": settings.base_url,
        "dimensions": settings.dimensions,
        "roles": settings.roles,
        "query_prefix": settings.query_prefix,
        "document_prefix": settings.document_prefix,
        "query_params": settings.query_params,
        "document_params": settings.document_params,
    }


def restart_settings(record: Mapping[str, Any]) -> list[str]:
    """The ``MEMORY_EMBEDDER__*`` settings the workers restart with to switch to a reindex's target: every
    one that its embedder was built with, not only the model."""
    fields = record.get("embedder") or {"model": record.get("target_spec")}
    return [
        f"MEMORY_EMBEDDER__{name.upper()}={json.dumps(value) if isinstance(value, dict) else value}"
        for name, value in fields.items()
        if value is not None
    ]


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
