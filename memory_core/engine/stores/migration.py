"""Filling a store of the current layout from one of an earlier layout: in bounded batches, resumably.

A store opened empty while a collection of an earlier layout (``stores.EARLIER_LAYOUTS``) holds data is filled
from it: every point is copied with its payload and dense vector as they are and its BM25 vectors made anew from
the stored text (``Lexical.item_vectors``), each item's context vector from the texts of the ``context_window``
items before it in its set (2 for an item whose set has no definition). Tombstones come along without vectors,
so a delete still outranks a late write after the migration. The old collection is left as it is: a backup.

What it holds in memory does not grow with the store's texts and vectors. A first pass reads only each point's
set, ``seq`` and tombstone flag, and orders the point ids by set and ``seq`` (28 bytes a point); the points are
then read in that order, ``MIGRATION_BATCH`` at a time, and the last texts of a set carried from one batch to
the next. On a server they are copied as they are read. The embedded engine keeps an open collection resident
in the process (about the store's serving footprint), so there the points are first written in order to a spill
file beside the store while only the old collection is open (``spill_layout``), and copied from it once that one
is closed: the two are never in memory at once, for the price of disk for the file (~2 KB a point) meanwhile.

Progress is a record in the store's metadata collection (``migration_record``), written before the new
collection is created and then every ``PROGRESS_EVERY`` seconds: the source, a cursor (points of the order
copied, and the offset in the spill file), the texts the next point's context takes, and ``complete`` at the
end. An open that finds it incomplete resumes from the cursor; the store counts as migrated only once the
record says complete (or, for a store migrated before there were records, once its collection holds data).
Copies land only over older points (``copy_in``), so a batch copied twice, or by two workers opening one server
at once, changes nothing.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import time
import uuid
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from memory_core.core.errors import StoreError
from memory_core.core.models import MemorySet
from memory_core.engine.stores.base import (
    LEXICAL,
    RawPoint,
    context_windows,
    is_tombstone,
    item_text,
    set_from_payload,
)

logger = logging.getLogger(__name__)

MIGRATION_BATCH = 1_000
"""Points read, re-indexed and written at a time."""
RELOAD_EVERY = 100_000
"""Points copied between two loads of the new shard on the embedded engine (``migrate_spilled``'s ``reload``)."""
PROGRESS_EVERY = 2.0
"""Seconds between two progress records (each is a durable write, ~50 ms on the embedded engine): a resumed
migration redoes at most that much work."""
DEFAULT_WINDOW = 2
"""The context window of an item whose set has no definition (``MemorySet.context_window``'s default)."""
KEY_FIELDS = ("namespace", "key", "set", "seq", "tombstone")
"""The payload fields the first pass reads: enough to order the points, none of their text."""
MIGRATION_RECORD = "layout migration"
COMPLETE = "complete"


def migration_record(collection: str) -> str:
    """The metadata record of the migration into ``collection`` (a store may hold one collection per model)."""
    return f"{MIGRATION_RECORD} to {collection}"


class EarlierLayout(Protocol):
    """The items collection of an earlier layout, read (never written) by a migration."""

    @property
    def name(self) -> str:
        """The collection's name (a directory's, on the embedded engine)."""
        ...

    def keys(self) -> Iterable[tuple[str, Mapping[str, Any]]]:
        """Every point's id and its ``KEY_FIELDS``, in one stable order (the engine's point-id order)."""
        ...

    def points(self, ids: Sequence[str]) -> dict[str, tuple[dict[str, Any], list[float] | None]]:
        """The payload and dense vector (None for a tombstone) of each of these points that exists, by id."""
        ...


class LayoutTarget(Protocol):
    """What a migration needs of the store it fills (both Qdrant adapters have it)."""

    def holds_collection(self, name: str) -> bool: ...

    def read_record(self, name: str) -> dict[str, Any] | None: ...

    def write_record(self, name: str, payload: Mapping[str, Any]) -> None: ...

    def copy_in(self, points: Sequence[tuple[RawPoint, Sequence[float] | None]]) -> int: ...

    def put_set(self, namespace: str, key: str, definition: MemorySet) -> None: ...


def layout_source(target: LayoutTarget, collection: str, earlier: Sequence[str], *, fresh: bool) -> str | None:
    """The earlier collection to fill ``collection`` from now, or None.

    A migration recorded and not complete is resumed. A ``fresh`` collection (not created yet) is filled from
    the newest earlier layout that holds data, and the migration is recorded here, before the collection is
    created, so that a kill at any point after leaves a record the next open resumes.

    Raises:
        StoreError: a migration is recorded incomplete and its source is gone.
    """
    name = migration_record(collection)
    record = target.read_record(name)
    if record is not None:
        if record.get("state") == COMPLETE:
            return None
        recorded = str(record.get("source", ""))
        if not recorded or not target.holds_collection(recorded):
            done = (record.get("cursor") or {}).get("done", 0)
            raise StoreError(
                f"the migration of {recorded!r} into {collection!r} stopped at {done} of {record.get('total', '?')} "
                f"points and {recorded!r} is gone; restore it (the store's backup of the earlier layout) so that the "
                "migration can finish"
            )
        return recorded
    if not fresh:
        return None  # migrated before there were records, or never of an earlier layout
    source = next((candidate for candidate in earlier if target.holds_collection(candidate)), None)
    if source is not None:
        target.write_record(name, {"state": "started", "source": source, "started_at": time.time()})
    return source


class _Order:
    """The points of a collection ordered by set and ``seq`` (tombstones first, in no set): ids as 16 bytes
    each, the set of each as a small integer. Ties in ``seq`` keep the order the points were read in."""

    def __init__(self, keys: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        sets: dict[tuple[str, str, str], int] = {}
        ids, seqs, groups = bytearray(), array("q"), array("i")
        for pid, payload in keys:
            try:
                ids += uuid.UUID(pid).bytes
            except ValueError:
                raise StoreError(f"point id {pid!r} of an earlier layout is not a UUID; expected point_id's") from None
            seqs.append(int(payload.get("seq") or 0))
            if is_tombstone(payload):
                groups.append(-1)
            else:
                groups.append(sets.setdefault((payload["namespace"], payload["key"], payload["set"]), len(sets)))
        self._ids = bytes(ids)
        self._groups = np.frombuffer(groups, dtype=np.int32)
        # lexsort is stable: equal seqs of a set stay in read order, as the one-pass migration had them.
        self._order = np.lexsort((np.frombuffer(seqs, dtype=np.int64), self._groups))

    def __len__(self) -> int:
        return len(self._order)

    def id_at(self, position: int) -> str:
        index = int(self._order[position]) * 16
        return str(uuid.UUID(bytes=self._ids[index : index + 16]))

    def group_at(self, position: int) -> int:
        return int(self._groups[self._order[position]])


def _indexed(payload: Mapping[str, Any], dense: list[float] | None) -> bool:
    """Whether a point gets BM25 vectors (and is context for the items after it): an item, not a tombstone."""
    return dense is not None and not is_tombstone(payload)


@dataclass(frozen=True, slots=True)
class _Point:
    """A point of the source as the copy takes it: ``group`` is its set's place in the order (-1: a tombstone),
    the same for consecutive points of one set."""

    group: int
    id: str
    payload: dict[str, Any]
    dense: list[float] | None


_Batches = Iterator[tuple[dict[str, int], list[_Point]]]
"""Batches of points in order, each with the cursor that resumes after it (``done``: points of the order)."""


class _Direct:
    """The source read in order, a batch at a time, while it is copied (a server: the points live there)."""

    def __init__(self, source: EarlierLayout) -> None:
        self._source = source
        self._order = _Order(source.keys())
        self.total = len(self._order)
        self.identity: int | None = None

    def batches(self, cursor: Mapping[str, int]) -> _Batches:
        for begin in range(int(cursor.get("done", 0)), self.total, MIGRATION_BATCH):
            end = min(self.total, begin + MIGRATION_BATCH)
            ids = [self._order.id_at(p) for p in range(begin, end)]
            found = self._source.points(ids)
            points = [
                _Point(self._order.group_at(p), pid, *found[pid])
                for p, pid in zip(range(begin, end), ids, strict=True)
                if pid in found  # else gone from the source since the first pass
            ]
            yield {"done": end}, points


_HEADER = struct.Struct("<16siII")  # point id, group, payload bytes, dense dimensions (0: none)
_COUNT = struct.Struct("<Q")  # the file's last bytes: how many points it holds (written last: it is complete)


def spill_layout(source: EarlierLayout, path: Path) -> None:
    """Writes the source's points in migration order into the file ``path`` (payloads as JSON, dense vectors as
    float32, which holds a float16 or float32 vector exactly), via a temporary file renamed once complete.

    For an embedded store, whose open collections are resident in the process: the source is read into the file
    while only it is open, and copied from the file once it is closed, so the two are never in memory at once.
    """
    partial = path.with_name(path.name + ".part")
    count = 0
    try:
        with partial.open("wb") as spill:
            for _, points in _Direct(source).batches({}):
                for point in points:
                    payload = json.dumps(point.payload, separators=(",", ":")).encode()
                    dense = b"" if point.dense is None else np.asarray(point.dense, dtype=np.float32).tobytes()
                    dimensions = 0 if point.dense is None else len(point.dense)
                    spill.write(_HEADER.pack(uuid.UUID(point.id).bytes, point.group, len(payload), dimensions))
                    spill.write(payload)
                    spill.write(dense)
                    count += 1
            spill.write(_COUNT.pack(count))
            spill.flush()
            os.fsync(spill.fileno())
        os.replace(partial, path)
    except OSError as exc:
        raise StoreError(
            f"the layout migration could not write {partial} ({exc.strerror}); it needs about 2 KB of free disk "
            "per point of the old store beside it, until it completes"
        ) from exc


class _Spilled:
    """The points of a spill file (``spill_layout``), read in order from a byte offset."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self.identity: int | None = path.stat().st_size
        with path.open("rb") as spill:
            spill.seek(-_COUNT.size, os.SEEK_END)
            (self.total,) = _COUNT.unpack(spill.read(_COUNT.size))

    def batches(self, cursor: Mapping[str, int]) -> _Batches:
        done, end = int(cursor.get("done", 0)), (self.identity or 0) - _COUNT.size
        with self._path.open("rb") as spill:
            spill.seek(int(cursor.get("offset", 0)))
            while spill.tell() < end:
                points: list[_Point] = []
                while len(points) < MIGRATION_BATCH and spill.tell() < end:
                    raw_id, group, size, dimensions = _HEADER.unpack(spill.read(_HEADER.size))
                    payload = json.loads(spill.read(size))
                    dense = np.frombuffer(spill.read(dimensions * 4), dtype=np.float32).tolist() if dimensions else None
                    points.append(_Point(group, str(uuid.UUID(bytes=raw_id)), payload, dense))
                done += len(points)
                yield {"done": done, "offset": spill.tell()}, points


class _Feed(Protocol):
    total: int
    identity: int | None

    def batches(self, cursor: Mapping[str, int]) -> _Batches: ...


class _Migration:
    """One run of a migration: copies the points of ``feed`` from where the record says it stopped."""

    def __init__(
        self,
        feed: _Feed,
        target: LayoutTarget,
        source: str,
        collection: str,
        definitions: Sequence[Mapping[str, Any]],
        reload: Callable[[], None] | None = None,
    ) -> None:
        self._feed, self._target, self._source, self._reload = feed, target, source, reload
        self._record = migration_record(collection)
        self._definitions = definitions
        self._windows = context_windows(definitions)

    def run(self) -> int:
        """Copies what is left, then the set definitions; records completion. Returns the points the source holds."""
        total = self._feed.total
        record = self._target.read_record(self._record) or {}
        # A cursor is only meaningful in the same order: a source (or spill file) that changed is copied again.
        resumed = (
            record.get("state") == "copying"
            and record.get("total") == total
            and record.get("identity") == self._feed.identity
        )
        cursor: dict[str, int] = dict(record.get("cursor") or {}) if resumed else {}
        history: list[str] = list(record.get("history") or []) if resumed else []
        group: int | None = record.get("group") if resumed else None
        progress = {**record, "state": "copying", "source": self._source, "total": total}
        progress.update(identity=self._feed.identity, cursor=cursor, history=history, group=group)
        self._target.write_record(self._record, progress)
        if cursor.get("done"):
            logger.warning("resuming the migration of %s at %d of %d points", self._source, cursor["done"], total)
        recorded, logged = time.monotonic(), cursor.get("done", 0)
        for reached, points in self._feed.batches(cursor):
            history, group = self._copy(points, history, group)
            if time.monotonic() - recorded >= PROGRESS_EVERY:
                progress.update(cursor=reached, history=history, group=group, updated_at=time.time())
                self._target.write_record(self._record, progress)
                recorded = time.monotonic()
            if self._reload is not None and reached["done"] // RELOAD_EVERY > logged // RELOAD_EVERY:
                self._reload()
            if reached["done"] * 10 // total > logged * 10 // total:
                logger.info("migration of %s: %d of %d points copied", self._source, reached["done"], total)
            logged = reached["done"]
        for payload in self._definitions:
            self._target.put_set(payload["namespace"], payload["key"], set_from_payload(payload))
        completed = {"state": COMPLETE, "source": self._source, "total": total, "completed_at": time.time()}
        self._target.write_record(self._record, {"started_at": record.get("started_at"), **completed})
        return total

    def _copy(self, points: list[_Point], history: list[str], group: int | None) -> tuple[list[str], int | None]:
        """Copies a batch. ``history``: the texts of the items before it in the set of ``group`` (the group of the
        point before it) that a context takes; returns both as they are after it."""
        copies: list[tuple[RawPoint, Sequence[float] | None]] = []
        for point in points:
            if point.group != group:
                history, group = [], point.group
            if not _indexed(point.payload, point.dense):
                copies.append((RawPoint(point.id, point.payload, {}), None))
                continue
            payload = point.payload
            window = self._windows.get((payload["namespace"], payload["key"], payload["set"]), DEFAULT_WINDOW)
            text = item_text(payload["value"])
            sparse = LEXICAL.item_vectors(text, history[-window:] if window else [])
            copies.append((RawPoint(point.id, payload, sparse), point.dense))
            history = [*history, text][-window:] if window else []
        self._target.copy_in(copies)
        return history, group


def migrate_layout(
    source: EarlierLayout, target: LayoutTarget, collection: str, definitions: Sequence[Mapping[str, Any]]
) -> int:
    """Fills ``target`` (its items ``collection``) from ``source``, read in order while it is copied; resumes a
    migration recorded incomplete. ``definitions``: the registry payloads of the source's sets (each set's
    ``context_window``), written into the target's registry once every point is copied. Returns how many points
    the source holds."""
    return _Migration(_Direct(source), target, source.name, collection, definitions).run()


def migrate_spilled(
    path: Path,
    source: str,
    target: LayoutTarget,
    collection: str,
    definitions: Sequence[Mapping[str, Any]],
    *,
    reload: Callable[[], None] | None = None,
) -> int:
    """``migrate_layout`` from the spill file of the collection ``source`` (``spill_layout``).

    ``reload``: called every ``RELOAD_EVERY`` points copied. The embedded engine holds the points written since
    it loaded a shard in anonymous memory and maps them from its files once it loads the shard again: without
    that, a migration's peak grew ~100 MB per 100,000 points beyond a process serving the migrated store
    (``ops/migration_bench.py``).
    """
    return _Migration(_Spilled(path), target, source, collection, definitions, reload).run()
