"""The FastAPI app (``create_app``) and the checks ``memory-core serve`` makes before it listens."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

from fastapi import Depends, FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from memory_core.core import errors
from memory_core.core.dispatch import open_redis
from memory_core.core.settings import Settings
from memory_core.servers import version
from memory_core.servers.boundary import LOOPBACK
from memory_core.servers.http.bodies import ErrorBody
from memory_core.servers.http.errors import (
    ERRORS,
    HTTP_CODES,
    on_http_error,
    on_invalid,
    on_memory_error,
    on_unexpected,
)
from memory_core.servers.http.routes import (
    checkpoint_routes,
    item_routes,
    probe_routes,
    scope_routes,
    set_routes,
    state_routes,
)
from memory_core.servers.http.serving import OwnHostOnly, Server, bearer

# -- the app ----------------------------------------------------------------------


class _App(FastAPI):
    def openapi(self) -> dict[str, Any]:
        # Validation errors answer 400 with ErrorBody (see on_invalid), never FastAPI's 422.
        if self.openapi_schema is None:
            schema = super().openapi()
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    operation.get("responses", {}).pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(name, None)
        return cast(dict[str, Any], self.openapi_schema)


def _documented_errors() -> dict[int | str, dict[str, Any]]:
    """The error responses of every ``/v1`` route in the OpenAPI document: status -> the codes it carries."""
    codes: dict[int, list[str]] = {}
    for status, code in [*((status, code) for _, status, code in ERRORS), *HTTP_CODES.items()]:
        codes.setdefault(status, []).append(code)
    return {status: {"model": ErrorBody, "description": ", ".join(codes[status])} for status in sorted(codes)}


def create_app(settings: Settings, *, dev: bool = False, host: str = "127.0.0.1", port: int = 8080) -> FastAPI:
    """The HTTP API over ``settings``' deployment, to be served on ``host:port``.

    Refuses (``ConfigurationError``) to serve without ``MEMORY_AUTH__TOKENS`` unless ``dev``, which serves
    every namespace without auth; ``memory-core serve --dev`` binds loopback only (see ``check``), and a
    dev app answers only requests sent to its own address (``OwnHostOnly``): 421 for another host name.
    """
    server = Server(settings, dev=dev)
    closing: list[Callable[[], None]] = []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await server.close()
            for close in closing:
                close()

    app = _App(
        title="memory-core",
        version=version(),
        summary="Distributed memory for AI agents: long-term sets, short-term state, checkpoints, recall.",
        lifespan=lifespan,
        generate_unique_id_function=_operation_id,
    )
    if dev:
        app.add_middleware(OwnHostOnly, host=host, port=port)
    app.state.memory_core = server
    auth: list[Any] = (
        [Depends(bearer)] if server.tokens is not None else []
    )  # declares the scheme; GuardedRoute checks it
    for router in (set_routes, item_routes, state_routes, checkpoint_routes, scope_routes):
        app.include_router(router, dependencies=auth, responses=_documented_errors())
    app.include_router(probe_routes)
    app.add_exception_handler(errors.MemoryCoreError, on_memory_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)  # routing's 404 and 405 are Starlette's
    app.add_exception_handler(RequestValidationError, on_invalid)
    app.add_exception_handler(ValidationError, on_invalid)
    app.add_exception_handler(Exception, on_unexpected)
    if settings.console.enabled:
        from memory_core.servers.console import install  # Jinja2 and the templates load only when served

        closing.append(install(app, settings, dev=dev).close)
    return app


def check(settings: Settings, *, dev: bool, host: str) -> None:
    """Refuses, before serving, what ``create_app`` cannot see: an open address in dev mode, an unreachable Redis."""
    if dev and host not in LOOPBACK:
        raise errors.ConfigurationError(f"--dev serves on loopback only, not on {host!r}")
    probe = open_redis(settings)
    try:
        probe.ping()  # a wrong MEMORY_REDIS__URL fails here too
    finally:
        probe.close()


def _operation_id(route: APIRoute) -> str:
    # The route function's name (add_items, search): short, and pinned by a test, since generated clients
    # name their methods after it.
    return route.name
