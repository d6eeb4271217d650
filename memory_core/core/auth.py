"""Optional per-namespace API tokens: a client holding a token can reach its namespace only.

``MEMORY_AUTH__TOKENS`` is a JSON object ``{"<token>": "<namespace>", ...}`` (a secret: it is a
``SecretStr`` and never logged). When set, the workers refuse every task whose token does not
grant the namespace it names, with the same message whether the namespace exists or not. The
client sends its token (``MEMORY_CLIENT__TOKEN``) in a message header, never in the task's
arguments, so it shows neither in Flower's argument view nor in dead letters.
"""

from __future__ import annotations

import hashlib
import hmac
import json

from pydantic import SecretStr

from memory_core.core.errors import AuthorizationError, ConfigurationError

AUTH_HEADER = "memory_auth"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def refusal(namespace: str) -> AuthorizationError:
    """The one refusal: it does not say whether the namespace exists or which part was wrong."""
    return AuthorizationError(f"the token does not grant access to namespace {namespace!r}")


class TokenMap:
    """Which namespace each token grants; tokens are kept as digests and compared in constant time."""

    def __init__(self, tokens: dict[str, str]) -> None:
        self._grants = [(_digest(token), namespace) for token, namespace in tokens.items()]
        self._token_of = {namespace: token for token, namespace in tokens.items()}

    @classmethod
    def from_secret(cls, secret: SecretStr | None) -> TokenMap | None:
        """The map configured in settings, or None when auth is off."""
        if secret is None:
            return None
        try:
            raw = json.loads(secret.get_secret_value())
        except ValueError as exc:
            raise ConfigurationError("MEMORY_AUTH__TOKENS must be a JSON object of token -> namespace") from exc
        if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
            raise ConfigurationError("MEMORY_AUTH__TOKENS must be a JSON object of token -> namespace")
        return cls(raw)

    def grants(self, token: str | None, namespace: str) -> bool:
        """Whether ``token`` grants ``namespace``."""
        if not token:
            return False
        digest = _digest(token)
        return any(hmac.compare_digest(digest, d) and ns == namespace for d, ns in self._grants)

    def namespace_of(self, token: str) -> str | None:
        """The namespace ``token`` grants, or None (every grant is compared, in constant time each)."""
        digest = _digest(token)
        found = None
        for grant, namespace in self._grants:
            if hmac.compare_digest(digest, grant):
                found = namespace
        return found

    def token_for(self, namespace: str) -> str | None:
        """A token granting ``namespace`` (for tasks the workers enqueue themselves, like compactions)."""
        return self._token_of.get(namespace)
