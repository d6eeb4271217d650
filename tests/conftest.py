"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_core.core.settings import Settings


@pytest.fixture
def unit_settings(tmp_path: Path) -> Settings:
    """Settings for tests that need no services: hashing embedder, a tmp data dir, nothing read from the env."""
    return Settings(
        _env_file=None,
        qdrant={"backend": "edge", "path": tmp_path / "qdrant"},
        embedder={"model": "hashing"},
    )
