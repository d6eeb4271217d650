"""What a request passes before its route runs: its host (without auth), the bearer token, its namespace, the
body's size, and a JSON parse that refuses non-finite numbers."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any, ClassVar, cast

from fastapi import Depends, HTTPException, Request, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_core import AsyncMemoryClient
from memory_core.core import errors
from memory_core.core.auth import TokenMap, refusal
from memory_core.core.settings import Settings
from memory_core.servers.boundary import loads_json, matches, own_hosts, own_origins
from memory_core.servers.http.errors import error_response

_SLACK = 64 * 1024
"""Bytes of a body beyond its payload: field names, ids, lifecycle values, JSON punctuation."""
_SMALL_BODY = 1024 * 1024
"""Every body that carries no items, state or snapshot (a set definition, a search, a recall)."""


def body_limits(settings: Settings) -> dict[str, int]:
    """The largest body each route family reads, in bytes, derived from the limits the client enforces.

    ``items``: a full add (``max_items_per_call`` items of ``max_value_chars`` characters and
    ``max_metadata_bytes`` of metadata; characters counted as one byte, so a full batch of non-ASCII text
    must be split). ``state``: one value at ``MEMORY_SHORT_TERM__MAX_VALUE_BYTES``. ``checkpoints``: a
    snapshot at its limit (four times ``max_value_chars``) with its metadata.
    """
    limits = settings.limits
    per_item = limits.max_value_chars + limits.max_metadata_bytes + 1024
    snapshot = max(limits.max_metadata_bytes, limits.max_value_chars * 4) + limits.max_metadata_bytes
    return {
        "items": limits.max_items_per_call * per_item + _SLACK,
        "state": settings.short_term.max_value_bytes + _SLACK,
        "checkpoints": snapshot + _SLACK,
        "small": _SMALL_BODY,
    }


# -- serving: tokens, clients, limits -------------------------------------------


class Server:
    """What one app serves with: the token map, an ``AsyncMemoryClient`` per token, and the body limits."""

    def __init__(self, settings: Settings, *, dev: bool) -> None:
        self.settings = settings
        self.tokens = TokenMap.from_secret(settings.auth.tokens)
        if self.tokens is None and not dev:
            raise errors.ConfigurationError(
                "memory-core serve needs MEMORY_AUTH__TOKENS (bearer token -> namespace), or --dev for a "
                "loopback-only server without auth"
            )
        self.limits = body_limits(settings)
        # Keyed by token, so bounded by the tokens configured: a client is made only for a known token.
        self._clients: dict[str | None, AsyncMemoryClient] = {}

    def client(self, token: str | None) -> AsyncMemoryClient:
        """The client acting with ``token`` (None: the configured client token, if any)."""
        if token not in self._clients:
            # The caller's own token goes to the workers, which check it again.
            self._clients[token] = AsyncMemoryClient(self.settings.with_token(token))
        return self._clients[token]

    def admit(self, request: Request) -> AsyncMemoryClient:
        """The client for this request; 401 without a known bearer token, 403 for another namespace."""
        if self.tokens is None:
            return self.client(None)
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthorized("send a bearer token: Authorization: Bearer <token>")
        token = token.strip()
        granted = self.tokens.namespace_of(token)
        if granted is None:
            raise _unauthorized("the bearer token is not known")
        namespace = request.path_params.get("namespace")
        if namespace != granted:
            raise refusal(str(namespace))
        return self.client(token)

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(401, message, headers={"WWW-Authenticate": "Bearer"})


def server_of(request: Request) -> Server:
    return cast(Server, request.app.state.memory_core)


class GuardedRoute(APIRoute):
    """A ``/v1`` route: the token is checked before the body is read, and the body is read up to its limit."""

    family: ClassVar[str] = "small"

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        family = self.family

        async def guarded(request: Request) -> Response:
            server = server_of(request)
            request.state.client = server.admit(request)
            return await handler(_JsonRequest(request.scope, _capped(request, server.limits[family])))

        return guarded


class _JsonRequest(Request):
    """A request whose JSON body is parsed by ``loads_json``: NaN and Infinity are refused, at any depth."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads_json(await self.body())
        return self._json


def route_class(family: str) -> type[GuardedRoute]:
    """A route class whose bodies are capped at the limit of ``family`` (see ``body_limits``)."""
    return type(f"_{family.title()}Route", (GuardedRoute,), {"family": family})


def _capped(request: Request, limit: int) -> Receive:
    """The request's body stream, refused with 413 once past ``limit`` bytes (declared or counted)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    upstream = request.receive
    seen = 0

    async def receive() -> Message:
        nonlocal seen
        message = await upstream()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise _too_large(limit)
        return message

    return receive


def _too_large(limit: int) -> HTTPException:
    return HTTPException(413, f"request body over this route's limit of {limit:,} bytes; split it into smaller calls")


def _client(request: Request) -> AsyncMemoryClient:
    return cast(AsyncMemoryClient, request.state.client)


Client = Annotated[AsyncMemoryClient, Depends(_client)]
bearer = HTTPBearer(auto_error=False, description="A token of MEMORY_AUTH__TOKENS; it grants one namespace.")


class OwnHostOnly:
    """Refuses a request sent to another host name (421) or from a page of another origin (403).

    For a server without auth on loopback: a web page can make a browser send requests to 127.0.0.1, by
    a form or by rebinding its own DNS name to it; the first carries the page's ``Origin``, the second the
    page's name in ``Host``. Neither reaches a route.
    """

    def __init__(self, app: ASGIApp, *, host: str, port: int) -> None:
        self.app = app
        self.hosts = own_hosts(host, port)
        self.origins = own_origins(host, port)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":  # the API has no websockets; lifespan passes
            headers = dict(scope["headers"])
            host = headers.get(b"host", b"").decode("latin-1")
            origin = headers.get(b"origin", b"").decode("latin-1")
            refusal = None
            if not matches(host, self.hosts):
                refusal = error_response(
                    421,
                    "misdirected_request",
                    f"host {host!r} is not this server's; without auth it answers {', '.join(self.hosts)} only",
                )
            elif origin and not matches(origin, self.origins):
                refusal = error_response(
                    403,
                    "forbidden",
                    f"origin {origin!r} is not this server's; without auth it takes no cross-site calls",
                )
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)
