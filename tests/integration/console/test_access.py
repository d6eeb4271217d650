"""The console's door: sign-in, sessions, CSRF, origins and security headers, through the ASGI test client."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from memory_core.core.settings import Settings
from memory_core.servers.console.access import COOKIE
from memory_core.servers.http.app import create_app

TOKENS = {"tok-acme": "acme", "tok-globex": "globex"}


def _settings(settings: Settings, **console: object) -> Settings:
    auth = settings.auth.model_copy(update={"tokens": __import__("pydantic").SecretStr(json.dumps(TOKENS))})
    group = settings.console.model_copy(update=console)
    return settings.model_copy(update={"auth": auth, "console": group})


@pytest.fixture
def console(settings: Settings, worker: object) -> Iterator[TestClient]:
    app = create_app(_settings(settings))
    with TestClient(app, base_url="http://console.test", follow_redirects=False) as http:
        yield http


def sign_in(http: TestClient, token: str) -> str:
    page = http.get("/ui/signin")
    pre = re.search(r'name="pre" value="([^"]+)"', page.text)
    assert pre is not None
    answer = http.post("/ui/signin", data={"token": token, "pre": pre.group(1)})
    assert answer.status_code == 303, answer.text
    home = http.get("/ui/", follow_redirects=True)
    found = re.search(r'name="csrf" value="([^"]+)"', home.text)
    assert found is not None
    return found.group(1)


def test_nothing_but_the_sign_in_page_and_static_files_answers_without_a_session(console: TestClient):
    for path in ("/ui/", "/ui/ns/acme", "/ui/ns/acme/keys/alice"):
        answer = console.get(path)
        assert answer.status_code == 303
        assert answer.headers["location"] == "/ui/signin"
    assert console.get("/ui/signin").status_code == 200
    assert console.get("/ui/static/console.css").status_code == 200


def test_every_page_carries_the_security_headers(console: TestClient):
    page = console.get("/ui/signin")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp
    assert "'unsafe-inline'" not in csp
    assert "frame-ancestors 'none'" in csp
    assert page.headers["referrer-policy"] == "no-referrer"
    assert re.findall(r"<script[^>]*>", page.text) == ['<script src="/ui/static/htmx.min.js" defer>']


def test_a_failed_sign_in_never_says_which_part_was_wrong_and_repeated_failures_slow_down(console: TestClient):
    answers = []
    for token in ("nope", "tok-acme-but-not", "", "still-nope", "and-again"):
        page = console.get("/ui/signin")
        pre = re.search(r'name="pre" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
        answers.append(console.post("/ui/signin", data={"token": token, "pre": pre}))
    assert {a.status_code for a in answers} == {401}
    # The same page each time, but for the sign-in form's own one-time value.
    assert len({re.sub(r'name="pre" value="[^"]+"', "", a.text) for a in answers[:3]}) == 1
    page = console.get("/ui/signin")
    pre = re.search(r'name="pre" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    slowed = console.post("/ui/signin", data={"token": "tok-acme", "pre": pre})
    assert slowed.status_code == 429  # even the right token waits once the address failed too often
    assert "Wait" in slowed.text


def test_a_namespace_token_sees_its_namespace_only(console: TestClient):
    sign_in(console, "tok-acme")
    assert console.get("/ui/").headers["location"] == "/ui/ns/acme"
    assert console.get("/ui/ns/acme").status_code == 200
    for other in ("globex", "does-not-exist"):
        refused = console.get(f"/ui/ns/{other}")
        assert refused.status_code == 403
        assert "does not grant" in refused.text


def test_a_post_without_the_csrf_token_or_from_another_site_is_refused(console: TestClient):
    csrf = sign_in(console, "tok-acme")
    assert console.post("/ui/signout", data={}).status_code == 403
    assert console.post("/ui/signout", data={"csrf": "forged"}).status_code == 403
    cross = console.post("/ui/signout", data={"csrf": csrf}, headers={"origin": "https://evil.example"})
    assert cross.status_code == 403
    assert console.get("/ui/ns/acme").status_code == 200  # still signed in
    out = console.post("/ui/signout", data={"csrf": csrf}, headers={"origin": "http://console.test"})
    assert out.status_code == 303
    assert console.get("/ui/ns/acme").status_code == 303  # the session is gone, whatever the cookie says


def test_the_session_cookie_is_http_only_same_site_strict_and_signed(console: TestClient):
    page = console.get("/ui/signin")
    pre = re.search(r'name="pre" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    answer = console.post("/ui/signin", data={"token": "tok-acme", "pre": pre})
    cookie = next(v for k, v in answer.headers.multi_items() if k == "set-cookie" and v.startswith(COOKIE))
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert "Path=/ui" in cookie
    console.cookies.clear()
    console.cookies.set(COOKIE, "forged.value.sig")
    assert console.get("/ui/ns/acme").status_code == 303


def test_dev_signs_a_browser_in_as_the_operator(settings: Settings, worker: object):
    app = create_app(settings, dev=True, host="127.0.0.1", port=8080)
    with TestClient(app, base_url="http://127.0.0.1:8080", follow_redirects=False) as http:
        home = http.get("/ui/")
        assert home.status_code == 200, home.text
        assert "Namespaces" in home.text
        assert "corrections on" in home.text
        assert http.get("/ui/", headers={"host": "evil.example"}).status_code == 421


def test_a_form_from_a_no_referrer_page_is_taken_only_when_the_browser_says_same_origin(console: TestClient):
    csrf = sign_in(console, "tok-acme")
    refused = console.post(
        "/ui/signout", data={"csrf": csrf}, headers={"origin": "null", "sec-fetch-site": "cross-site"}
    )
    assert refused.status_code == 403
    taken = console.post(
        "/ui/signout", data={"csrf": csrf}, headers={"origin": "null", "sec-fetch-site": "same-origin"}
    )
    assert taken.status_code == 303
