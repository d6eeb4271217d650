"""What a reindex compares and repairs: the parts of the point-id space, the target collection, and the plan that
makes the target's points agree with the source's (``plan_repairs``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memory_core.core.messages import REINDEX_PARTS
from memory_core.core.models import Scope
from memory_core.engine.embedders import Embedder
from memory_core.engine.embedders.base import embed_timed
from memory_core.engine.stores.base import RawPoint, ReindexableStore
from memory_core.engine.stores.fingerprints import REINDEX_RECORD

PARTS = REINDEX_PARTS
"""Parts of the point-id space copied independently: point ids are UUIDs, so part ``i`` holds the ids whose
first hex digit is ``i``, and uniform ids spread the work evenly."""
OWED = PARTS
"""The part number of the catch-up of owed copies (``memory.reindex_batch`` with ``part=OWED``)."""
VOLATILE = frozenset({"keep_until"})
"""Payload fields each collection sets by itself (a tombstone's expiry is stamped by its own write)."""


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
    state: str = "building"
    """The reindex's state when this process last read it."""

    answered: int = 0
    """How many embedding calls the target's endpoint answered in this process: whether a batch reached it."""

    def vectors(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = embed_timed(self.embedder, texts)
        self.answered += 1
        return vectors


@dataclass
class Repairs:
    """What makes the target agree with the source for some points (``plan_repairs``)."""

    copies: list[RawPoint] = field(default_factory=list)
    """Source points the target holds older or not at all: items (embedded anew) and tombstones."""
    patches: list[RawPoint] = field(default_factory=list)
    """Source items the target holds at the same ``seq`` with other fields (a fold, a pin): fields only."""
    removals: dict[str, int] = field(default_factory=dict)
    """Target points the source does not hold (erased, swept), by id -> the ``seq`` they were read with."""

    @property
    def ids(self) -> list[str]:
        return [p.id for p in self.copies] + [p.id for p in self.patches] + list(self.removals)


def comparable_fields(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A payload as compared between the collections: without ``VOLATILE`` fields, and a null field as absent
    (the engines store a field set to null either way)."""
    return {name: value for name, value in payload.items() if name not in VOLATILE and value is not None}


def plan_repairs(source: Mapping[str, RawPoint], target: Mapping[str, RawPoint], ids: Sequence[str]) -> Repairs:
    """The repairs that make the target's points ``ids`` agree with the source's (each side: id -> point).

    Ordering decides, as for every write: a source point newer than the target's (or an owed placeholder,
    which is just older than the write it stands for) is copied; at the same ``seq`` only the fields are
    patched (a change in place never changes the text, so the vector stays right); a target point newer than
    the source's was mirrored after a source write this read missed, and is left alone. A target point the
    source does not hold at all goes, unless it is a tombstone (it keeps late copies out until it expires).
    """
    repairs = Repairs()
    for pid in ids:
        held, wanted = target.get(pid), source.get(pid)
        if wanted is None or wanted.owed:
            if held is not None and (held.owed or not held.tombstone):
                repairs.removals[pid] = held.seq
            continue
        same = held is not None and held.seq == wanted.seq
        if held is None or held.seq < wanted.seq or (same and (held.owed or (wanted.tombstone and not held.tombstone))):
            repairs.copies.append(wanted)  # as ``due`` decides: over older, and a delete over its own version
        elif (
            held.seq == wanted.seq
            and not held.tombstone
            and not wanted.tombstone
            and comparable_fields(held.payload) != comparable_fields(wanted.payload)
        ):
            repairs.patches.append(wanted)
    return repairs


def scope_of(point: RawPoint) -> Scope:
    return Scope(point.payload["namespace"], point.payload["key"], point.payload["set"])
