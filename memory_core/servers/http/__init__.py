"""memory-core over HTTP (``memory-core serve``): versioned JSON routes over the asyncio client.

Each request becomes one call of an ``AsyncMemoryClient``: the same validation, scoping, messages and
errors as in-process callers; this layer keeps no data of its own. A bearer token from
``MEMORY_AUTH__TOKENS`` grants one namespace: every route names a namespace, and the token is checked
against it before the body is read (401 without a known token, 403 for another namespace). Each token
has a client of its own that sends that token to the workers, which check it again.

Bodies are capped per route family (``body_limits``), and every error is one JSON shape with a stable
code (``ERRORS``): ``{"error": {"code": "memory_set_not_found", "message": "..."}}``.
"""

from memory_core.servers.http.app import check, create_app
from memory_core.servers.http.errors import ERRORS, HTTP_CODES
from memory_core.servers.http.serving import body_limits

__all__ = ["ERRORS", "HTTP_CODES", "body_limits", "check", "create_app"]
