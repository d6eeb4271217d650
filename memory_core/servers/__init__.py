"""Servers that put the client behind another door: HTTP (``memory-core serve``) and MCP (``memory-core mcp``).

They run in the app's side of the queue: they hold a client and never import the engine.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _installed_version


def version() -> str:
    """memory-core's version, as each server reports it (OpenAPI ``info.version``, MCP ``serverInfo``)."""
    try:
        return _installed_version("memory-core")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"
