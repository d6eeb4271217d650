"""Sparse copies: a backup of a preallocated store takes what its data takes, not its apparent size."""

from __future__ import annotations

import os
from pathlib import Path

from memory_core.core.files import copy_file_sparse, copy_tree_sparse, disk_usage

MB = 1 << 20


def _preallocated(path: Path, data: bytes, apparent: int) -> None:
    """Like the engine's WAL: some data at the start, then a long hole up to ``apparent`` bytes."""
    with path.open("wb") as handle:
        handle.write(data)
        handle.truncate(apparent)


def test_a_sparse_copy_is_byte_equal_and_keeps_the_holes(tmp_path: Path):
    source, target = tmp_path / "wal", tmp_path / "copy"
    data = os.urandom(300_000)
    _preallocated(source, data, 64 * MB)
    copy_file_sparse(source, target)
    assert target.read_bytes() == source.read_bytes()
    assert target.stat().st_size == 64 * MB
    assert disk_usage(target) < 2 * MB  # a plain copy takes all 64 MB


def test_a_file_that_ends_in_data_or_in_a_hole_keeps_its_length(tmp_path: Path):
    for name, content in (("data-end", b"\0" * 200_000 + b"tail"), ("hole-end", b"head" + b"\0" * 200_000)):
        source, target = tmp_path / name, tmp_path / f"{name}.copy"
        source.write_bytes(content)
        copy_file_sparse(source, target)
        assert target.read_bytes() == content


def test_a_tree_copy_skips_what_it_is_told_to_and_measures_blocks(tmp_path: Path):
    store = tmp_path / "store"
    (store / "segments").mkdir(parents=True)
    _preallocated(store / "segments" / "wal", b"x" * 100_000, 32 * MB)
    (store / ".owner").write_text("123")
    copy_tree_sparse(store, tmp_path / "backup", skip=".owner")
    assert (tmp_path / "backup" / "segments" / "wal").read_bytes() == (store / "segments" / "wal").read_bytes()
    assert not (tmp_path / "backup" / ".owner").exists()
    assert disk_usage(tmp_path / "backup") < 1 * MB
    assert disk_usage(tmp_path / "backup" / "segments" / "wal") == disk_usage(tmp_path / "backup")


def test_pages_scattered_over_a_file_take_no_more_than_the_source(tmp_path: Path):
    # The engine writes pages here and there in its preallocated files: one 4 KiB page in every
    # 64 KiB took 16 times the source's blocks when holes were found per 64 KiB.
    source, target = tmp_path / "segment", tmp_path / "copy"
    with source.open("wb") as handle:
        handle.truncate(16 * MB)
        for offset in range(0, 16 * MB, 64 * 1024):
            handle.seek(offset)
            handle.write(os.urandom(4096))
    copy_file_sparse(source, target)
    assert target.read_bytes() == source.read_bytes()
    assert disk_usage(target) <= disk_usage(source) + 64 * 1024
