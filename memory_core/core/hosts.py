"""Which ``Host`` (and ``Origin``) a server without auth answers: its own address, never a rebound name.

A web page can rebind its own DNS name to 127.0.0.1 and then read from, or write to, a server on this
machine as if it were its own origin; the browser still sends the page's name in ``Host``. A server that
answers only the names of its own address (``own_hosts``) refuses those requests. The HTTP API's dev mode,
the MCP server and the workers' metrics endpoint all check with these helpers.
"""

from __future__ import annotations

import ipaddress

LOOPBACK = ("127.0.0.1", "localhost", "::1")
"""The addresses a server without auth may listen on."""


def is_loopback(host: str) -> bool:
    """Whether a listen address reaches this machine only: ``localhost``, 127.0.0.0/8 or ``::1``.

    ``0.0.0.0``, ``::`` and the empty string listen on every interface, so they are not loopback.
    """
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name other than localhost may resolve anywhere
        return False


def own_hosts(host: str, port: int) -> list[str]:
    """The ``Host`` header values a server listening on ``host:port`` answers: each loopback name and ``host``.

    ``port`` 0 (a port the OS picks) matches any port, as ``name:*``. Port 80 also matches the bare name,
    which is how browsers send it.
    """
    names = sorted({*LOOPBACK, host})
    authorities = [f"[{name}]" if ":" in name else name for name in names]
    hosts = [f"{name}:{port or '*'}" for name in authorities]
    return hosts + authorities if port == 80 else hosts


def own_origins(host: str, port: int) -> list[str]:
    """The ``Origin`` header values of pages served from this server's own address."""
    return [f"http://{allowed}" for allowed in own_hosts(host, port)]


def matches(value: str, allowed: list[str]) -> bool:
    """Whether ``value`` is one of ``allowed``, where ``name:*`` stands for ``name`` with any port."""
    return any(value == pattern or (pattern.endswith(":*") and _with_port(value, pattern[:-2])) for pattern in allowed)


def _with_port(value: str, name: str) -> bool:
    prefix = name + ":"
    return value.startswith(prefix) and value[len(prefix) :].isdigit()
