"""The reindex's pure parts: how the point-id space is cut, which repairs a copy makes, what a request may say."""

from __future__ import annotations

import uuid

import pytest
from pydantic import ValidationError

from memory_core.core.messages import ReindexBatch, ReindexRequest
from memory_core.engine.reindex import OWED, PARTS, part_bounds, plan_repairs
from memory_core.engine.stores.base import RawPoint


def test_the_parts_cut_the_uuid_space_into_adjacent_ranges_that_hold_every_id():
    bounds = [part_bounds(part) for part in range(PARTS)]
    assert bounds[0][0] == "00000000-0000-0000-0000-000000000000"
    assert bounds[-1][1] is None
    assert all(bounds[i][1] == bounds[i + 1][0] for i in range(PARTS - 1))
    for _ in range(200):
        point = str(uuid.uuid4())
        holding = [p for p, (start, stop) in enumerate(bounds) if start <= point and (stop is None or point < stop)]
        assert holding == [int(point[0], 16)]


def _point(seq: int, *, tombstone: bool = False, owed: bool = False, **fields: object) -> RawPoint:
    flags = {"tombstone": 1} if tombstone or owed else {}
    return RawPoint("p", {"seq": seq, **flags, **({"owed": 1} if owed else {}), **fields}, {})


def _repair(source: RawPoint | None, target: RawPoint | None) -> str:
    plan = plan_repairs({} if source is None else {"p": source}, {} if target is None else {"p": target}, ["p"])
    kinds = [
        kind for kind, found in (("copy", plan.copies), ("patch", plan.patches), ("remove", plan.removals)) if found
    ]
    assert len(kinds) <= 1
    return kinds[0] if kinds else "none"


@pytest.mark.parametrize(
    ("source", "target", "repair"),
    [
        (_point(5), None, "copy"),  # not in the new collection yet
        (_point(5), _point(4), "copy"),  # an older version there
        (_point(5), _point(4, owed=True), "copy"),  # owed: the placeholder of a write stands just below it
        (_point(5), _point(5), "none"),  # the same version: copied or mirrored already
        (_point(5, pinned=1), _point(5, pinned=0), "patch"),  # a pin or fold in place since the copy read it
        (_point(5), _point(6), "none"),  # a newer mirrored write: never taken back
        (_point(5), _point(6, tombstone=True), "none"),  # deleted since: the copy must not resurrect it
        (_point(5, tombstone=True), _point(5), "copy"),  # a delete of exactly the version there
        (_point(5, tombstone=True), _point(5, tombstone=True), "none"),
        (_point(5, tombstone=True, keep_until=9.0), _point(5, tombstone=True, keep_until=8.0), "none"),
        (None, _point(5), "remove"),  # erased or swept from the source after the copy read it
        (None, _point(4, owed=True), "remove"),  # owed for an item erased since
        (None, _point(5, tombstone=True), "none"),  # a tombstone keeps late copies out until it expires
    ],
)
def test_a_copy_repairs_only_what_differs_and_never_goes_back_in_time(
    source: RawPoint | None, target: RawPoint | None, repair: str
):
    assert _repair(source, target) == repair


def test_a_start_needs_a_target_and_other_actions_take_none():
    with pytest.raises(ValidationError, match="needs 'to'"):
        ReindexRequest(action="start")
    with pytest.raises(ValidationError, match="only action 'start'"):
        ReindexRequest(action="status", to="hashing")
    with pytest.raises(ValidationError, match="to"):
        ReindexRequest(action="start", to="bert-base")
    with pytest.raises(ValidationError, match="base_url"):
        ReindexRequest(action="start", to="openai:text-embedding-3-small", base_url="ftp://x")
    assert (
        ReindexRequest(action="start", to="fastembed:BAAI/bge-small-en-v1.5").to == "fastembed:BAAI/bge-small-en-v1.5"
    )


@pytest.mark.parametrize("part", [-1, OWED + 1, "3", 2.0, True])
def test_a_batch_names_one_part_as_an_integer(part: object):
    with pytest.raises(ValidationError):
        ReindexBatch.model_validate({"part": part})
