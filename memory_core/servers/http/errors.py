"""Errors over HTTP: our error tree as statuses with stable codes, and the one JSON shape every error takes."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from memory_core.core import errors
from memory_core.core.models import describe
from memory_core.core.validation import short_repr

logger = logging.getLogger(__name__)

ERRORS: tuple[tuple[type[errors.MemoryCoreError], int, str], ...] = (
    (errors.SetDefinitionConflict, 409, "set_definition_conflict"),
    (errors.ConflictError, 409, "conflict"),
    (errors.InvalidRequestError, 400, "invalid_request"),
    (errors.MemorySetNotFound, 404, "memory_set_not_found"),
    (errors.NotFoundError, 404, "not_found"),
    (errors.AuthorizationError, 403, "forbidden"),
    (errors.QuotaExceeded, 429, "quota_exceeded"),
    (errors.NoWorkerAvailable, 503, "no_worker_available"),
    (errors.ReplyTimeout, 504, "reply_timeout"),
    (errors.BrokerUnavailable, 503, "broker_unavailable"),
    (errors.TransientStoreError, 503, "store_unavailable"),
    (errors.StoreError, 500, "store_error"),
    (errors.TransientEmbedderError, 503, "embedder_unavailable"),
    (errors.EmbedderError, 500, "embedder_error"),
    (errors.TransientRerankerError, 503, "reranker_unavailable"),
    (errors.RerankerError, 502, "reranker_error"),
    (errors.SummarizerError, 502, "summarizer_error"),
    (errors.FormationBusy, 503, "formation_busy"),
    (errors.FormationError, 502, "formation_error"),
    (errors.CompactionError, 500, "compaction_error"),
    (errors.CorruptDataError, 500, "corrupt_data"),
    (errors.RedisCommandError, 500, "redis_command_error"),
    (errors.ConfigurationError, 500, "configuration_error"),
)
"""Our errors as (class, HTTP status, code); the first class the error is an instance of wins. The codes are
a contract: clients branch on them. Anything else is 500 ``internal_error``."""

HTTP_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    421: "misdirected_request",
}
"""Codes of the errors the HTTP layer itself answers (no token, an unknown route, a body over its limit, a
request sent to another host name in dev mode)."""

INTERNAL_ERROR = (500, "internal_error")
"""What any other error answers (status, code)."""

RETRY_AFTER: dict[str, int] = {
    "no_worker_available": 10,
    "broker_unavailable": 5,
    "store_unavailable": 5,
    "embedder_unavailable": 30,
    "reranker_unavailable": 5,
    "formation_busy": 2,
}
"""The ``Retry-After`` (seconds) each 503 answers with: something is down for now, and a retry may succeed. An
embeddings endpoint's outage is given longer: a write it failed is kept and retried by the workers meanwhile
(``MEMORY_EMBEDDER__OUTAGE_RETRY``), so sending it again at once only adds to the endpoint's load. A busy
formation answers the wait it names when that is longer (``MEMORY_FORMATION__BUSY_RETRY``, 2 by default)."""


# -- errors -----------------------------------------------------------------------


def error_response(status: int, code: str, message: str, field: str | None = None, **headers: str) -> JSONResponse:
    detail: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        detail["field"] = field
    return JSONResponse({"error": detail}, status_code=status, headers=headers or None)


async def on_memory_error(request: Request, exc: Exception) -> JSONResponse:
    for cls, status, code in ERRORS:
        if isinstance(exc, cls):
            return error_response(status, code, str(exc), **_retry_after(code, exc))
    logger.error("%s %s failed: %s", request.method, request.url.path, type(exc).__name__)
    return error_response(*INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")


def _retry_after(code: str, exc: Exception) -> dict[str, str]:
    """The ``Retry-After`` header of an error answered with ``code``, if it has one: the endpoint's own when the
    error carries it (a ``TransientEmbedderError`` raised in this process), else ``RETRY_AFTER``'s."""
    seconds = RETRY_AFTER.get(code)
    if seconds is None:
        return {}
    asked = getattr(exc, "retry_after", None)
    if isinstance(asked, int | float) and asked > seconds:
        seconds = math.ceil(asked)
    return {"Retry-After": str(seconds)}


async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    message = str(exc.detail)
    if exc.status_code in (404, 405) and message in ("Not Found", "Method Not Allowed"):  # routing's own
        message = f"no route {request.method} {request.url.path}"
    return error_response(
        exc.status_code, HTTP_CODES.get(exc.status_code, "http_error"), message, **(exc.headers or {})
    )


async def on_invalid(request: Request, exc: Exception) -> JSONResponse:
    # FastAPI's 422 (a body or parameter outside its schema) becomes our 400, naming the field.
    if isinstance(exc, ValidationError):  # a request to the workers the client built from the path
        return error_response(400, "invalid_request", describe(exc, "request"))
    assert isinstance(exc, RequestValidationError)
    problems: dict[str, str] = {}
    # A value out of range is the complaint that matters, before "not a str" from another branch of a union.
    for err in sorted(exc.errors(), key=lambda err: err.get("type") not in _RANGE_ERRORS):
        if err.get("type") == "json_invalid":
            reason = err.get("ctx", {}).get("error", "")
            return error_response(400, "invalid_request", f"the body is not valid JSON: {reason}", field="body")
        field = _field(err.get("loc", ()))
        problems.setdefault(field, f"{field}: {err.get('msg', 'invalid')}{_got(err)}")  # a union's first complaint
    message = "invalid request: " + "; ".join(list(problems.values())[:5])
    return error_response(400, "invalid_request", message, field=next(iter(problems), None))


_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}


def _got(err: Any) -> str:
    """The offending value, when it is one value (not the body or an object that lacks a field)."""
    value = err.get("input")
    if value is None or isinstance(value, dict | list):
        return ""
    return f" (got {short_repr(value)})"


_TYPE_NAMES = {"str", "int", "float", "bool", "datetime", "list", "dict"}


def _field(loc: Sequence[Any]) -> str:
    """``("body", "items", 0, "ChatMessage", "role")`` as ``items.0.role``: no source, no union branches."""
    parts = [str(part) for part in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    # A union names the branch it tried ("float", "list[float]", "constrained-float", "ChatMessage"); our fields
    # are snake_case.
    kept = [p for p in parts if not ("[" in p or p in _TYPE_NAMES or p[:1].isupper() or p.startswith("constrained-"))]
    return ".".join(kept) or "body"


async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("%s %s failed", request.method, request.url.path)
    return error_response(*INTERNAL_ERROR, "internal error; the server's log has the details")
