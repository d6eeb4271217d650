"""The memory console: web pages at ``/ui`` of ``memory-core serve`` to see, search and correct what agents
remember. Server-rendered (Jinja2, autoescaped), htmx and one CSS file vendored in ``static/``, no inline
script: every response carries a Content-Security-Policy that forbids it, and frames, and referrers.

``install`` adds the console to the API's app: its routes, static files, security headers and error pages.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.base import BaseHTTPMiddleware

from memory_core.core.errors import AuthorizationError, MemoryCoreError, NotFoundError
from memory_core.core.settings import Settings
from memory_core.servers.boundary import matches
from memory_core.servers.console import pages
from memory_core.servers.console.access import COOKIE, Console

PREFIX = "/ui"

SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


def install(app: FastAPI, settings: Settings, *, dev: bool) -> Console:
    """Adds the console to ``app`` (the HTTP API's); returns its state, to close with the app."""
    console = Console(settings, dev=dev)
    app.state.console = console
    app.include_router(pages.router)
    for module in _views():
        app.include_router(module.router)
    app.mount(f"{PREFIX}/static", StaticFiles(packages=[("memory_core.servers.console", "static")]), name="console")
    app.add_middleware(BaseHTTPMiddleware, dispatch=_guard)
    app.add_exception_handler(pages.SignInRequired, _sign_in_required)
    for kind in (StarletteHTTPException, MemoryCoreError, RequestValidationError, Exception):
        app.add_exception_handler(kind, _pages_or(app.exception_handlers[kind]))
    return console


Handler = Callable[[Request, Any], Any]


def _pages_or(api_handler: Handler) -> Handler:
    """The app's handler of an error for ``/v1``, an error page for the console."""

    async def handle(request: Request, exc: Any) -> Any:
        if not request.url.path.startswith(PREFIX):
            return await api_handler(request, exc)
        if isinstance(exc, StarletteHTTPException):
            return _error_page(request, exc.status_code, str(exc.detail))
        if isinstance(exc, MemoryCoreError):
            return _error_page(request, error_status(exc), str(exc))
        if isinstance(exc, RequestValidationError):
            return _error_page(request, 400, "the form's values are not what this page takes")
        await api_handler(request, exc)  # logs it as the API does; the page says no more than the API would
        return _error_page(request, 500, "the console failed to answer; the server's log says why")

    return handle


def _views() -> list[Any]:
    """The view modules beside ``pages`` (each with a ``router`` under ``/ui``)."""
    from memory_core.servers.console import audit, facts, items, operations, search, sessions, sets

    return [facts, sessions, operations, sets, search, items, audit]


async def _guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    """Security headers on every console response; a state-changing request from another origin refused."""
    if not request.url.path.startswith(PREFIX):
        return await call_next(request)
    if request.method not in ("GET", "HEAD") and not _same_origin(request):
        response: Response = _error_page(request, 403, "a request from another site is refused")
    else:
        response = await call_next(request)
    cookie = getattr(request.state, "set_cookie", None)
    if cookie is not None:
        pages._session_cookie(request, response, cookie)
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def _same_origin(request: Request) -> bool:
    """Whether a state-changing request comes from a page of this server (``Origin`` or ``Sec-Fetch-Site``)."""
    origin = request.headers.get("origin")
    host = request.headers.get("host", "")
    fetch_site = request.headers.get("sec-fetch-site")
    if origin is not None and origin != "null":
        return matches(origin, [f"{request.url.scheme}://{host}"])
    if origin == "null":
        # What a browser sends for a form posted from a page with Referrer-Policy: no-referrer (ours): then only
        # its own word that the request is same-origin admits it.
        return fetch_site == "same-origin"
    return (fetch_site or "same-origin") in ("same-origin", "none")


def _sign_in_required(request: Request, exc: Exception) -> Response:
    if request.headers.get("hx-request") == "true":
        return Response(status_code=401, headers={"HX-Redirect": f"{PREFIX}/signin"})
    response = RedirectResponse(f"{PREFIX}/signin", status_code=303)
    response.delete_cookie(COOKIE, path=PREFIX)
    return response


def _error_page(request: Request, status: int, message: str) -> HTMLResponse:
    return pages.render(request, "error.html", status=status, message=message, code=status, who=None)


def error_status(exc: MemoryCoreError) -> int:
    """The status a console page answers with for a typed error of the client."""
    if isinstance(exc, AuthorizationError):
        return 403
    if isinstance(exc, NotFoundError):
        return 404
    return 400 if isinstance(exc, ValueError) else 502
