"""Who is signed in to the console, and what they may do: sessions, sign-in throttling, CSRF, clients.

A sign-in takes a token: a namespace token of ``MEMORY_AUTH__TOKENS`` (that namespace only) or an operator
token of ``MEMORY_CONSOLE__OPERATOR_TOKENS`` (every namespace, the workers and queues). The session lives in
Redis (so signing out ends it everywhere, and replicas share it) under a random id; the cookie carries that
id signed (``itsdangerous``), HttpOnly, SameSite=Strict, Secure over TLS, for ``MEMORY_CONSOLE__SESSION_TTL``.
The session holds no token: the console acts in a namespace with that namespace's own token, so the workers
check every call as they check the API's. Each session has its CSRF token; every state-changing request must
carry it (a form field or the ``X-CSRF-Token`` header htmx sends).

``memory-core serve --dev`` (loopback only, no tokens) signs every browser in as the operator, with
corrections allowed, as ``/v1`` is open there.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

import redis
from itsdangerous import BadSignature, TimestampSigner
from pydantic import BaseModel, ConfigDict, ValidationError

from memory_core import MemoryClient
from memory_core.core.auth import TokenMap
from memory_core.core.dispatch import open_redis
from memory_core.core.keys import Keys
from memory_core.core.settings import Settings

COOKIE = "mc_console"
PRE_COOKIE = "mc_console_pre"
"""A random value set with the sign-in form and sent back with it: the sign-in's own CSRF check."""
_FAILURE_WINDOW = 600


def token_id(token: str) -> str:
    """A token's public id (the start of its SHA-256): what the audit log and the console show, never the token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()[:12]


class Principal(BaseModel):
    """One signed-in session: a namespace's holder, or the operator (``namespace`` None)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    session_id: str
    namespace: str | None
    token_id: str
    can_write: bool
    csrf: str
    expires_at: float

    @property
    def operator(self) -> bool:
        return self.namespace is None

    def may_see(self, namespace: str) -> bool:
        """Whether this principal may look into ``namespace``."""
        return self.namespace is None or self.namespace == namespace

    @property
    def who(self) -> str:
        """How the audit log names this principal."""
        return f"{'operator' if self.operator else 'token'} {self.token_id}"


@dataclass
class Console:
    """The console's state in one server process: settings, tokens, Redis, signer and one client per token."""

    settings: Settings
    dev: bool

    def __post_init__(self) -> None:
        self.keys = Keys(self.settings.redis.key_prefix)
        self.tokens = TokenMap.from_secret(self.settings.auth.tokens)
        config = self.settings.console
        operators = json.loads(config.operator_tokens.get_secret_value()) if config.operator_tokens else []
        self._operators = [hashlib.sha256(t.encode()).digest() for t in operators]
        self.signer = TimestampSigner(self._signing_key(), salt="memory-core console session")
        self.redis: redis.Redis = open_redis(self.settings)
        self._clients: dict[str | None, MemoryClient] = {}

    def _signing_key(self) -> bytes:
        config = self.settings.console
        if config.secret_key is not None:
            return config.secret_key.get_secret_value().encode()
        if self.settings.auth.tokens is not None:
            # The same on every replica that serves these tokens, and void once they change.
            material = self.settings.auth.tokens.get_secret_value().encode()
            return hmac.new(b"memory-core console", material, hashlib.sha256).digest()
        return secrets.token_bytes(32)  # --dev: sessions end with the process

    @property
    def open_door(self) -> bool:
        """``--dev`` without tokens: every browser is the operator, as ``/v1`` is open to every caller."""
        return self.dev and self.tokens is None

    # -- clients -------------------------------------------------------------------

    def client(self, namespace: str) -> MemoryClient:
        """The client that acts in ``namespace``: with that namespace's own token when auth is on."""
        token = self.tokens.token_for(namespace) if self.tokens is not None else None
        if token not in self._clients:
            self._clients[token] = MemoryClient(self.settings.with_token(token))
        return self._clients[token]

    def any_client(self) -> MemoryClient:
        """A client for reads that name no namespace (workers, queues): the server's own settings."""
        if None not in self._clients:
            self._clients[None] = MemoryClient(self.settings)
        return self._clients[None]

    def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
        self.redis.close()

    # -- signing in ------------------------------------------------------------------

    def authenticate(self, token: str) -> tuple[str | None, bool] | None:
        """``(namespace or None for the operator, may write)`` for a token, or None when it is not known."""
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        operator = False
        for known in self._operators:
            operator |= hmac.compare_digest(digest, known)
        namespace = self.tokens.namespace_of(token) if self.tokens is not None else None
        corrections = self.settings.console.corrections
        if operator:
            return None, corrections in ("operators", "all")
        if namespace is not None:
            return namespace, corrections == "all"
        return None

    def wait_before_sign_in(self, address: str) -> float:
        """Seconds this address must wait before another try (0: it may try now)."""
        raw = self.redis.get(self.keys.console_failures(address))
        failures = int(raw) if raw is not None and raw.isdigit() else 0
        over = failures - self.settings.console.sign_in_failures
        return 0.0 if over < 0 else float(min(2**over, 60))

    def failed_sign_in(self, address: str) -> None:
        key = self.keys.console_failures(address)
        with self.redis.pipeline() as pipe:
            pipe.incr(key)
            pipe.expire(key, _FAILURE_WINDOW)
            pipe.execute()

    def open_session(self, namespace: str | None, who: str, *, can_write: bool) -> tuple[Principal, str]:
        """A new session and the cookie value that names it."""
        ttl = self.settings.console.session_ttl
        principal = Principal(
            session_id=secrets.token_urlsafe(24),
            namespace=namespace,
            token_id=who,
            can_write=can_write,
            csrf=secrets.token_urlsafe(24),
            expires_at=time.time() + ttl,
        )
        self.redis.set(self.keys.console_session(principal.session_id), principal.model_dump_json(), ex=ttl)
        return principal, self.signer.sign(principal.session_id).decode()

    def dev_session(self) -> tuple[Principal, str]:
        """``--dev``: the operator, with corrections, no token."""
        return self.open_session(None, "dev", can_write=True)

    def session(self, cookie: str | None) -> Principal | None:
        """The live session a cookie names (a forged, expired or signed-out one is None)."""
        if not cookie:
            return None
        try:
            session_id = self.signer.unsign(cookie, max_age=self.settings.console.session_ttl).decode()
        except BadSignature:
            return None
        raw = self.redis.get(self.keys.console_session(session_id))
        if raw is None:
            return None
        try:
            principal = Principal.model_validate_json(raw)
        except ValidationError:
            return None  # not ours to trust: a malformed record signs nobody in
        if principal.session_id != session_id or principal.expires_at < time.time():
            return None
        return principal

    def close_session(self, principal: Principal) -> None:
        self.redis.delete(self.keys.console_session(principal.session_id))


def csrf_ok(principal: Principal, given: Any) -> bool:
    """Whether a request's CSRF token is the session's (compared in constant time)."""
    return isinstance(given, str) and hmac.compare_digest(given.encode(), principal.csrf.encode())
