"""The reindex's pure parts: how the point-id space is cut, which copies are due, what a request may say."""

from __future__ import annotations

import uuid

import pytest
from pydantic import ValidationError

from memory_core.core.messages import ReindexBatch, ReindexRequest
from memory_core.engine.reindex import PARTS, _copy_due, part_bounds
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


def _point(seq: int, *, tombstone: bool = False) -> RawPoint:
    return RawPoint("p", {"seq": seq, **({"tombstone": 1} if tombstone else {})}, {})


@pytest.mark.parametrize(
    ("point", "held", "due"),
    [
        (_point(5), None, True),  # not in the new collection yet
        (_point(5), (4, False), True),  # an older version there
        (_point(5), (5, False), False),  # the same version: copied or mirrored already
        (_point(5), (6, False), False),  # a newer mirrored write: never taken back
        (_point(5), (6, True), False),  # deleted since: the copy must not resurrect it
        (_point(5, tombstone=True), (5, False), True),  # a delete of exactly the version there
        (_point(5, tombstone=True), (5, True), False),
    ],
)
def test_a_copy_is_due_only_over_older_points(point: RawPoint, held: tuple[int, bool] | None, due: bool):
    assert _copy_due(point, held) is due


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


@pytest.mark.parametrize("part", [-1, PARTS, "3", 2.0, True])
def test_a_batch_names_one_part_as_an_integer(part: object):
    with pytest.raises(ValidationError):
        ReindexBatch.model_validate({"part": part})
