"""The search tester (a query over one set, with each ranker's part of every hit's score) and the recall
preview (exactly what ``recall`` hands an agent for a query, with its token count).

The tester runs ``explain``, which searches as ``search`` does and reports the fused score and the dense,
BM25, context and rerank scores behind it, without counting as a read of the hits. The preview runs
``recall`` itself: it is a real recall, so it counts as a read of what it returns, as the agent's would.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from memory_core.core.errors import InvalidRequestError
from memory_core.core.validation import short_repr
from memory_core.servers.console import display  # noqa: F401  (registers the templates' filters)
from memory_core.servers.console.pages import Signed, console_of, granted, render
from memory_core.servers.console.sets import metadata_value, set_path

router = APIRouter(prefix="/ui", include_in_schema=False)

MODES = ("hybrid", "dense", "lexical")
RERANK: dict[str, bool | None] = {"": None, "on": True, "off": False}
Text = Annotated[str, Query(max_length=8_000)]


def _limit(text: str, largest: int) -> int:
    if not text.strip().isdigit() or not 1 <= int(text) <= largest:
        raise InvalidRequestError(f"limit {short_repr(text)} is not a whole number from 1 to {largest}")
    return int(text)


def _search_arguments(mode: str, limit: str, rerank: str, field: str, value: str, largest: int) -> dict[str, Any]:
    if mode not in MODES:
        raise InvalidRequestError(f"mode {short_repr(mode)} is not one of {', '.join(MODES)}")
    if rerank not in RERANK:
        raise InvalidRequestError(f"rerank {short_repr(rerank)} is not 'on', 'off' or empty (the workers' default)")
    if value and not field.strip():
        raise InvalidRequestError("a metadata value needs the field it is the value of")
    filters = {field.strip(): metadata_value(value)} if field.strip() else None
    return {"limit": _limit(limit, largest), "mode": mode, "rerank": RERANK[rerank], "filters": filters}


@router.get("/ns/{namespace}/keys/{key}/sets/{set_name}/search")
def search_view(
    request: Request,
    namespace: str,
    key: str,
    set_name: str,
    who: Signed,
    q: Text = "",
    mode: Text = "hybrid",
    limit: Text = "10",
    rerank: Text = "",
    field: Text = "",
    value: Text = "",
    superseded: Text = "",
) -> HTMLResponse:
    granted(who, namespace)
    console = console_of(request)
    results, error = None, None
    if q.strip():
        try:
            arguments = _search_arguments(mode, limit, rerank, field, value, console.settings.limits.max_search_limit)
            memory = console.client(namespace).long_term(namespace, key)
            results = memory.explain(set_name, q, include_superseded=superseded == "yes", **arguments)
        except InvalidRequestError as exc:
            error = str(exc)
    form = {"q": q, "mode": mode, "limit": limit, "rerank": rerank, "field": field, "value": value}
    return render(
        request,
        "search.html",
        status=400 if error else 200,
        who=who,
        namespace=namespace,
        key=key,
        set_name=set_name,
        set_path=set_path(namespace, key, set_name),
        form=form | {"superseded": superseded},
        modes=MODES,
        results=results,
        error=error,
    )


@router.get("/ns/{namespace}/keys/{key}/recall")
def recall_view(
    request: Request,
    namespace: str,
    key: str,
    who: Signed,
    q: Text = "",
    limit: Text = "10",
    token_budget: Text = "",
    session: Text = "",
    sets: Text = "",
) -> HTMLResponse:
    granted(who, namespace)
    console = console_of(request)
    reply, error = None, None
    if q.strip():
        try:
            budget = _limit(token_budget, 10_000_000) if token_budget.strip() else None
            names = [name.strip() for name in sets.split(",") if name.strip()] or None
            reply = console.client(namespace).recall(
                namespace,
                key,
                q,
                session_id=session.strip() or None,
                limit=_limit(limit, console.settings.limits.max_search_limit),
                token_budget=budget,
                sets=names,
            )
        except InvalidRequestError as exc:
            error = str(exc)
    form = {"q": q, "limit": limit, "token_budget": token_budget, "session": session, "sets": sets}
    return render(
        request,
        "recall.html",
        status=400 if error else 200,
        who=who,
        namespace=namespace,
        key=key,
        form=form,
        reply=reply,
        error=error,
    )
