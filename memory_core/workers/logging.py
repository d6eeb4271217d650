"""The one logging configuration of worker and ops processes, applied through Celery's setup_logging signal.

Every line it writes is cleaned of the deployment's secrets (``redact_secrets_of``), exception text included:
memory-core's own errors never carry one, but a third party's may (an endpoint that quotes the key it was
sent in its error, chained under ours), and a log line is the one place nobody reviews before it is kept.
"""

from __future__ import annotations

import json
import logging.config
import threading
from typing import Any
from urllib.parse import urlsplit

from celery import current_task
from celery.app.log import TaskFormatter
from pydantic import BaseModel, SecretStr

from memory_core.core.settings import Settings

REDACTED = "***"
MIN_SECRET_LENGTH = 4
"""Shorter values are not redacted: replacing every "ab" in every line would make the log unreadable, and
a secret that short protects nothing anyway."""

_secrets: tuple[str, ...] = ()
_secrets_lock = threading.Lock()


def secret_values(settings: Settings) -> set[str]:
    """Every secret ``settings`` hold: each ``SecretStr`` (and the tokens of the token map, the passwords of
    Flower's ``user:password`` pairs), and the password of each URL (Redis, the broker, endpoints)."""
    found: set[str] = set()
    for group in type(settings).model_fields:
        values = getattr(settings, group)
        if not isinstance(values, BaseModel):
            continue
        for name in type(values).model_fields:
            value = getattr(values, name)
            if isinstance(value, SecretStr):
                found |= _parts_of_secret(value.get_secret_value())
            elif isinstance(value, str) and "://" in value:
                found |= _url_passwords(value)
    return {secret for secret in found if len(secret) >= MIN_SECRET_LENGTH}


def _parts_of_secret(raw: str) -> set[str]:
    """A secret and the secrets inside it: the tokens of a JSON token map, the passwords of ``user:pw,...``."""
    parts = {raw}
    try:
        mapping = json.loads(raw)
    except ValueError:
        mapping = None
    if isinstance(mapping, dict):
        parts |= {str(token) for token in mapping}
    elif ":" in raw:
        parts |= {pair.partition(":")[2] for pair in raw.split(",")}
    return parts


def _url_passwords(value: str) -> set[str]:
    """The password of a URL, or of one inside a spec (``http:https://user:pw@host``)."""
    start = value.find("://")
    scheme_start = max(value.rfind(":", 0, start) + 1, 0)  # past a spec's provider prefix
    try:
        password = urlsplit(value[scheme_start:]).password
    except ValueError:
        return set()
    return {password} if password else set()


def redact_secrets_of(settings: Settings) -> None:
    """Adds ``settings``' secrets to those every line of this process's log is cleaned of (for each app made)."""
    global _secrets
    with _secrets_lock:
        # Longest first, so a secret that holds another is replaced whole.
        _secrets = tuple(sorted(set(_secrets) | secret_values(settings), key=len, reverse=True))


def redact(text: str) -> str:
    """``text`` with each registered secret replaced by ``REDACTED``."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


class TaskLineFormatter(TaskFormatter):
    """Celery's ``TaskFormatter`` with ``%(task_label)s``: `` [task name(task id)]`` on a line logged inside a
    task, nothing on the others (Celery's own fields read ``???(???)`` there: start-up, heartbeats, sweeps).

    Every line comes out cleaned of the registered secrets (``redact``), its traceback and chained
    exceptions included; so does the traceback text cached on the record for other handlers."""

    def format(self, record: logging.LogRecord) -> str:
        if current_task and current_task.request:
            record.task_label = f" [{current_task.name}({current_task.request.id})]"
        else:
            record.task_label = ""
        line = super().format(record)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return redact(line)


def configure_logging(level: str = "INFO") -> None:
    """Console logging with the task's name and id on every line logged inside a task, secrets redacted."""
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
