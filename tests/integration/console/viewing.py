"""What the console's view tests share: a console app with namespace and operator tokens, signing in, and the
check that stored hostile text renders as inert text."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi.testclient import TestClient
from markupsafe import escape
from pydantic import SecretStr

from memory_core.core.settings import Settings
from memory_core.servers.http.app import create_app

OPERATOR = "tok-operator"
HOSTILE = "<script>alert(1)</script> <img src=x onerror=alert(1)> javascript:alert(1) {{7*7}}"
"""Stored where a value can go: it must come back as the same text, never as markup, a link or a template."""
ORIGIN = "http://console.test"


def console_settings(settings: Settings, namespaces: list[str], *, corrections: str = "off") -> Settings:
    """``settings`` with a token per namespace (``tok-<namespace>``), the operator's, and who may correct."""
    tokens = {f"tok-{namespace}": namespace for namespace in namespaces}
    auth = settings.auth.model_copy(update={"tokens": SecretStr(json.dumps(tokens))})
    console = settings.console.model_copy(
        update={"operator_tokens": SecretStr(json.dumps([OPERATOR])), "corrections": corrections}
    )
    return settings.model_copy(update={"auth": auth, "console": console})


@contextmanager
def open_console(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), base_url=ORIGIN, follow_redirects=False) as http:
        yield http


def sign_in(http: TestClient, token: str) -> str:
    """Signs ``http`` in with ``token``; returns the session's CSRF token."""
    page = http.get("/ui/signin")
    pre = re.search(r'name="pre" value="([^"]+)"', page.text)
    assert pre is not None
    answer = http.post("/ui/signin", data={"token": token, "pre": pre.group(1)})
    assert answer.status_code == 303, answer.text
    home = http.get("/ui/", follow_redirects=True)
    found = re.search(r'name="csrf" value="([^"]+)"', home.text)
    assert found is not None
    return found.group(1)


def assert_inert(html: str, hostile: str = HOSTILE) -> None:
    """``hostile`` is on the page as escaped text: no tag, no live javascript: link, no evaluated template."""
    assert "<script>alert(1)</script>" not in html
    assert "<img src=x onerror" not in html
    assert not re.search(r"""(href|src|action)\s*=\s*["']?\s*javascript:""", html, re.IGNORECASE)
    assert str(escape(hostile)) in html  # the whole value, as said: {{7*7}} stayed itself (no 49 in its place)
