"""The one logging configuration of worker and ops processes, applied through Celery's setup_logging signal."""

from __future__ import annotations

import logging.config
from typing import Any

from celery import current_task
from celery.app.log import TaskFormatter


class TaskLineFormatter(TaskFormatter):
    """Celery's ``TaskFormatter`` with ``%(task_label)s``: `` [task name(task id)]`` on a line logged inside a
    task, nothing on the others (Celery's own fields read ``???(???)`` there: start-up, heartbeats, sweeps)."""

    def format(self, record: logging.LogRecord) -> str:
        if current_task and current_task.request:
            record.task_label = f" [{current_task.name}({current_task.request.id})]"
        else:
            record.task_label = ""
        return super().format(record)


def configure_logging(level: str = "INFO") -> None:
    """Console logging with the task's name and id on every line logged inside a task."""
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {
                "task": {
                    "()": TaskLineFormatter,
                    "fmt": "%(asctime)s %(levelname)s %(processName)s%(task_label)s %(name)s: %(message)s",
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
