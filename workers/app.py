"""``celery -A workers.app`` from a checkout: the app of ``memory_core.workers.app`` (the name installs use)."""

from __future__ import annotations

from typing import Any

from memory_core.workers import app as _app
from memory_core.workers.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    # The Celery CLI looks the module's ``app`` up; it is built lazily, from the environment, by the real module.
    return getattr(_app, name)
