import logging
import sys

import pytest

from memory_core.core.settings import Settings
from memory_core.workers import logging as worker_logging
from memory_core.workers.logging import TaskLineFormatter, redact_secrets_of, secret_values

SECRETS = {
    "redis": "redis-pass-123",
    "broker": "amqp-pass-456",
    "embedder": "sk-embed-789",
    "rerank": "rk-rerank-012",
    "rerank url": "rerank-url-pass",
    "anthropic": "sk-ant-345",
    "qdrant": "qd-key-678",
    "auth token": "tok-acme-901",
    "client token": "tok-client-234",
    "flower": "flower-pass-567",
}


def _settings() -> Settings:
    return Settings(
        _env_file=None,
        redis={"url": f"redis://:{SECRETS['redis']}@localhost:6379/0"},
        celery={"broker_url": f"amqp://user:{SECRETS['broker']}@rabbit/vhost"},
        embedder={"api_key": SECRETS["embedder"]},
        rerank={"api_key": SECRETS["rerank"], "model": f"http:https://user:{SECRETS['rerank url']}@rerank/v1/rerank"},
        anthropic={"api_key": SECRETS["anthropic"]},
        qdrant={"api_key": SECRETS["qdrant"]},
        auth={"tokens": f'{{"{SECRETS["auth token"]}": "acme"}}'},
        client={"token": SECRETS["client token"]},
        flower={"basic_auth": f"admin:{SECRETS['flower']}"},
    )


def test_every_secret_of_the_settings_is_found_urls_token_maps_and_passwords_included():
    found = secret_values(_settings())
    assert set(SECRETS.values()) <= found
    assert "admin" not in found  # a user name is no secret
    assert secret_values(Settings(_env_file=None, embedder={"api_key": "abc"})) == set()  # too short to redact


def _record(message: str, *args: object) -> logging.LogRecord:
    """A record as Celery's "raised unexpected" makes one: our error, chained to a third party's that quotes
    the key."""
    try:
        try:
            raise PermissionError(f"Incorrect API key provided: {SECRETS['embedder']}")
        except PermissionError as exc:
            raise RuntimeError(f"refused, rerank key {SECRETS['rerank']}") from exc
    except RuntimeError:
        exc_info = sys.exc_info()
    return logging.LogRecord("celery.app.trace", logging.ERROR, __file__, 1, message, args, exc_info)


def test_every_line_the_worker_logs_is_cleaned_of_the_secrets_tracebacks_included(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(worker_logging, "_secrets", ())
    redact_secrets_of(_settings())
    record = _record("connecting to %s with token %s", f"redis://:{SECRETS['redis']}@localhost", SECRETS["auth token"])
    line = TaskLineFormatter("%(levelname)s%(task_label)s %(name)s: %(message)s", use_color=False).format(record)
    assert "Incorrect API key provided: ***" in line  # the chained exception is in the line, cleaned
    assert "connecting to redis://:***@localhost with token ***" in line
    for secret in SECRETS.values():
        assert secret not in line
        assert secret not in (record.exc_text or "")  # what another handler would reuse


def test_a_secret_that_holds_another_is_replaced_whole(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(worker_logging, "_secrets", ())
    redact_secrets_of(Settings(_env_file=None, embedder={"api_key": "key-1234"}, rerank={"api_key": "key-1234-long"}))
    assert worker_logging.redact("a key-1234-long and a key-1234") == "a *** and a ***"
