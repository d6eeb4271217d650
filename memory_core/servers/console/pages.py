"""The console's routes: sign-in and out, and the scope views. Each view is one URL, rendered on the server.

Route handlers are plain functions: FastAPI runs them in its thread pool, and they call the blocking client
and admin APIs (the same operations the asyncio client runs for ``/v1``). Other views add their routes to
``router`` from modules of their own.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Annotated, Any, cast
from urllib.parse import quote

import jinja2
from fastapi import APIRouter, Depends, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from memory_core.core.models import Namespace
from memory_core.servers.console import scopes
from memory_core.servers.console.access import COOKIE, PRE_COOKIE, Console, Principal, csrf_ok, token_id

HERE = Path(__file__).parent
templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,  # every value is escaped, in every view: memory text is whatever users said
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
templates.filters["q"] = lambda value: quote(str(value), safe="")

router = APIRouter(prefix="/ui", include_in_schema=False)

PathName = Annotated[str, Namespace]


class SignInRequired(Exception):
    """Raised by a view reached without a live session: the app answers with the sign-in page."""


def console_of(request: Request) -> Console:
    return cast(Console, request.app.state.console)


def _signed_in(console: Console, cookie: str | None) -> tuple[Principal | None, str | None]:
    found = console.session(cookie)
    if found is None and console.open_door:
        return console.dev_session()
    return found, None


async def principal(request: Request) -> Principal:
    """The signed-in principal; ``--dev`` signs a browser in as the operator on its first request. A request
    that changes anything must carry the session's CSRF token (the form's ``csrf`` field, or the header htmx
    sends), else 403 before the view runs."""
    console = console_of(request)
    found, cookie = await run_in_threadpool(_signed_in, console, request.cookies.get(COOKIE))
    if found is None:
        raise SignInRequired
    if cookie is not None:
        request.state.set_cookie = cookie
    if request.method not in ("GET", "HEAD"):
        given: Any = request.headers.get("x-csrf-token")
        if given is None and request.headers.get("content-type", "").startswith(_FORMS):
            given = (await request.form()).get("csrf")
        if not csrf_ok(found, given):
            raise HTTPException(403, "this form has expired or did not come from the console; reload the page")
    return found


_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


Signed = Annotated[Principal, Depends(principal)]


def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A page (or, for an htmx request, the same template: views pick their partial with ``hx``)."""
    who = context.pop("who", None)
    html = templates.get_template(name).render(
        request=request,
        who=who,
        csrf=who.csrf if who is not None else "",
        dev=console_of(request).open_door,
        hx=request.headers.get("hx-request") == "true",
        **context,
    )
    return HTMLResponse(html, status_code=status)


def granted(who: Principal, namespace: str) -> None:
    """403 unless ``who`` may see ``namespace``: the same answer whether it exists or not."""
    if not who.may_see(namespace):
        raise HTTPException(403, "this sign-in does not grant that namespace")


def require_write(who: Principal) -> None:
    """403 unless ``who`` may correct memories."""
    if not who.can_write:
        raise HTTPException(403, "corrections are off for this sign-in (MEMORY_CONSOLE__CORRECTIONS)")


# -- signing in and out ---------------------------------------------------------------


@router.get("/signin")
def sign_in_page(request: Request) -> HTMLResponse:
    pre = secrets.token_urlsafe(16)
    response = render(request, "signin.html", pre=pre, failed=False)
    _pre_cookie(request, response, pre)
    return response


@router.post("/signin")
def sign_in(request: Request, token: Annotated[str, Form()] = "", pre: Annotated[str, Form()] = "") -> Response:
    console = console_of(request)
    address = request.client.host if request.client else "unknown"
    if not pre or not secrets.compare_digest(pre, request.cookies.get(PRE_COOKIE, "")):
        raise HTTPException(403, "this form has expired or did not come from the console; reload the page")
    wait = console.wait_before_sign_in(address)
    if wait > 0:
        return _sign_in_failed(request, 429, wait)
    found = console.authenticate(token.strip()) if token.strip() else None
    if found is None:
        console.failed_sign_in(address)
        return _sign_in_failed(request, 401, console.wait_before_sign_in(address))
    namespace, can_write = found
    _, cookie = console.open_session(namespace, token_id(token.strip()), can_write=can_write)
    response = RedirectResponse("/ui/", status_code=303)
    _session_cookie(request, response, cookie)
    response.delete_cookie(PRE_COOKIE, path="/ui")
    return response


def _sign_in_failed(request: Request, status: int, wait: float) -> HTMLResponse:
    # One answer for every failure: it never says whether the token was unknown or of another kind.
    pre = secrets.token_urlsafe(16)
    response = render(request, "signin.html", status=status, pre=pre, failed=True, wait=wait)
    _pre_cookie(request, response, pre)
    return response


@router.post("/signout")
def sign_out(request: Request, who: Signed) -> Response:
    # A dev sign-in just made by this very request would be closed at once: harmless.
    console_of(request).close_session(who)
    response = RedirectResponse("/ui/signin", status_code=303)
    response.delete_cookie(COOKIE, path="/ui")
    return response


def _session_cookie(request: Request, response: Response, cookie: str) -> None:
    ttl = console_of(request).settings.console.session_ttl
    secure = request.url.scheme == "https"
    response.set_cookie(COOKIE, cookie, max_age=ttl, path="/ui", httponly=True, samesite="strict", secure=secure)


def _pre_cookie(request: Request, response: Response, value: str) -> None:
    secure = request.url.scheme == "https"
    response.set_cookie(PRE_COOKIE, value, max_age=900, path="/ui", httponly=True, samesite="strict", secure=secure)


# -- scopes ---------------------------------------------------------------------------


@router.get("/")
def home(request: Request, who: Signed) -> Response:
    if not who.operator:
        assert who.namespace is not None
        return RedirectResponse(f"/ui/ns/{quote(who.namespace, safe='')}", status_code=303)
    return render(request, "namespaces.html", who=who, namespaces=scopes.namespaces(console_of(request)))


@router.get("/ns/{namespace}")
def namespace_view(request: Request, namespace: str, who: Signed) -> HTMLResponse:
    granted(who, namespace)
    summary = scopes.namespace_summary(console_of(request), namespace)
    return render(request, "namespace.html", who=who, namespace=namespace, summary=summary)


@router.get("/ns/{namespace}/keys/{key}")
def key_view(request: Request, namespace: str, key: str, who: Signed) -> HTMLResponse:
    granted(who, namespace)
    summary = scopes.namespace_summary(console_of(request), namespace)
    entry = summary.keys.get(key) or scopes.KeySummary(key)
    return render(request, "key.html", who=who, namespace=namespace, key=key, entry=entry)
