"""The one logging configuration of worker and ops processes, applied through Celery's setup_logging signal."""

from __future__ import annotations

import logging.config
from typing import Any


def configure_logging(level: str = "INFO") -> None:
    """Console logging with the task id on every line logged inside a task."""
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {
                "task": {
                    "()": "celery.app.log.TaskFormatter",
                    "fmt": "%(asctime)s %(levelname)s %(processName)s [%(task_name)s(%(task_id)s)] %(name)s: %(message)s",
                }
            },
            "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "task"}},
            "root": {"handlers": ["console"], "level": level},
            # Memory text is only ever logged at DEBUG by memory_core; keep third parties quiet too.
            "loggers": {"httpx": {"level": "WARNING"}, "kombu": {"level": "WARNING"}},
        }
    )


def on_setup_logging(loglevel: Any = "INFO", **_: Any) -> None:
    """Receiver of ``celery.signals.setup_logging``: connecting it stops Celery from hijacking the root logger."""
    level = logging.getLevelName(loglevel) if isinstance(loglevel, int) else str(loglevel or "INFO")
    configure_logging(level)
