"""Copying the embedded engine's directories without filling their holes, and measuring them on disk.

The engine preallocates its write-ahead log and segment files as sparse files: a store holding 1.8 MB
of data had 462 MB of apparent size. A plain copy writes every zero, so backups (and stores restored
from them) took the apparent size on disk. Zero blocks are skipped here and left as holes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

_READ = 1 << 20
# Holes are found per filesystem page: the engine writes its data in pages scattered over the file, so
# skipping only 64 KiB runs of zeros took three times the source's blocks.
_PAGE = 4096
_ZEROS = bytes(_READ)


def copy_file_sparse(source: Path, target: Path) -> None:
    """Copies ``source`` to ``target`` (mode and times too), leaving every all-zero page a hole."""
    with source.open("rb") as src, target.open("wb") as dst:
        while chunk := src.read(_READ):
            if chunk == _ZEROS[: len(chunk)]:
                dst.seek(len(chunk), os.SEEK_CUR)
                continue
            view = memoryview(chunk)
            for start in range(0, len(chunk), _PAGE):
                page = view[start : start + _PAGE]
                if page == _ZEROS[: len(page)]:
                    dst.seek(len(page), os.SEEK_CUR)
                else:
                    dst.write(page)
        dst.truncate()  # a file that ends in a hole still gets its full length
    shutil.copystat(source, target)


def copy_tree_sparse(source: Path, target: Path, *, skip: str | None = None) -> None:
    """``shutil.copytree`` with sparse file copies; files matching the glob ``skip`` are left out."""

    def copy(src: str, dst: str) -> None:
        copy_file_sparse(Path(src), Path(dst))

    ignore = shutil.ignore_patterns(skip) if skip else None
    shutil.copytree(source, target, ignore=ignore, copy_function=copy)


def disk_usage(path: Path) -> int:
    """Bytes ``path`` (a file or a directory tree) takes on disk: allocated blocks, not apparent sizes."""
    if path.is_file():
        return path.stat().st_blocks * 512
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())
