"""The import contracts name every subpackage they must: a new subpackage is never silently outside them."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import memory_core

ROOT = Path(__file__).resolve().parents[2]


def _contract(name_starts: str) -> dict[str, Any]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (found,) = [c for c in contracts if c["name"].startswith(name_starts)]
    return found  # type: ignore[no-any-return]


def test_every_subpackage_but_the_celery_layer_is_forbidden_the_task_layer():
    here = Path(memory_core.__file__).parent
    subpackages = {f"memory_core.{p.name}" for p in here.iterdir() if (p / "__init__.py").exists()}
    contract = _contract("nothing of memory_core but its Celery layer")
    assert set(contract["source_modules"]) == subpackages - {"memory_core.workers"}
    assert {"memory_core.workers", "celery"} <= set(contract["forbidden_modules"])
