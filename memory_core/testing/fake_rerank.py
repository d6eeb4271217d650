"""A fake rerank API on loopback, for tests and benchmarks of ``MEMORY_RERANK__MODEL=http:<url>``.

It answers ``POST /rerank`` (also ``/v1/rerank``, ``/v2/rerank``) in one of the two shapes real servers use:
``cohere`` (Cohere, Jina, vLLM: ``{"query", "documents", "top_n"}`` -> ``{"results": [{"index",
"relevance_score"}]}``) or ``tei`` (Hugging Face TEI: ``{"query", "texts"}`` -> ``[{"index", "score"}]``),
refusing the other shape with a 422 as they do. Scores come from ``scorer`` (by default the share of the
query's words a document holds), best first. It records every request, and can be told to misbehave: 429,
500, a stall past the client's timeout, a body that is not JSON, an index out of range (``bad_index``), one
result fewer than asked (``short``), an index twice (``repeated``), a score that is not a number (``nan``), a
401 that quotes the whole key it was given (``echo_key``); with ``api_key`` set it refuses any other bearer key
with a 401.

    with FakeRerankEndpoint() as fake:
        settings.rerank.model = f"http:{fake.url}"
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from memory_core.testing.loopback import Answer, LoopbackServer, json_body

VALID_KEY = "rk-fake-valid-key"
"""The key the fake accepts when it asks for one (the default)."""

Scorer = Callable[[str, str], float]
"""(query, document) -> relevance; higher is better."""

_WORD = re.compile(r"\w+")
_ROUTES = ("/rerank", "/v1/rerank", "/v2/rerank")


def word_overlap(query: str, document: str) -> float:
    """The share of the query's words that the document holds (0..1): a stand-in that reads both texts."""
    asked = set(_WORD.findall(query.lower()))
    return len(asked & set(_WORD.findall(document.lower()))) / max(len(asked), 1)


@dataclass
class Behaviour:
    """What the fake does with the next requests. ``failures`` requests fail with ``mode`` first, then ``ok``."""

    mode: str = "ok"  # ok | http_429 | http_500 | stall | garbage | bad_index | short | repeated | nan | echo_key
    failures: int = 1_000_000
    stall_seconds: float = 5.0


@dataclass
class FakeRerankEndpoint(LoopbackServer):
    """The server; ``requests`` holds every decoded request body in order, ``keys`` the bearer keys sent."""

    shape: Literal["cohere", "tei"] = "cohere"
    api_key: str | None = VALID_KEY
    scorer: Scorer = word_overlap
    behaviour: Behaviour = field(default_factory=Behaviour)
    requests: list[dict[str, Any]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.listen()

    @property
    def url(self) -> str:
        """The rerank URL, as servers of its shape name it (``MEMORY_RERANK__MODEL=http:<url>``)."""
        return f"{self.origin}/v1/rerank" if self.shape == "cohere" else f"{self.origin}/rerank"

    def behave(self, mode: str = "ok", *, failures: int = 1_000_000, stall_seconds: float = 5.0) -> None:
        """Sets the behaviour of the following requests, and forgets the ones recorded so far."""
        with self.lock:
            self.behaviour = Behaviour(mode=mode, failures=failures, stall_seconds=stall_seconds)
            self.requests.clear()
            self.keys.clear()

    def answer(self, path: str, body: Any, key: str) -> Answer:
        if path not in _ROUTES:
            return 404, {}, json_body({"error": f"no route {path}"})
        if not isinstance(body, dict):
            return 422, {}, json_body({"error": "the body is not a JSON object", "error_type": "Validation"})
        with self.lock:
            self.requests.append(body)
            self.keys.append(key)
            behaviour = self.behaviour
            mode = self.take(behaviour)
        if mode == "echo_key":  # a careless server: its 401 quotes the whole key it was given
            return 401, {}, json_body({"message": f"invalid api token {key}"})
        if self.api_key is not None and key != self.api_key:
            return 401, {}, json_body({"message": "invalid api token"})
        if mode in {"http_429", "http_500"}:
            return int(mode[-3:]), {}, json_body({"message": mode})
        if mode == "stall":
            time.sleep(behaviour.stall_seconds)
        if mode == "garbage":
            return 200, {}, b"<html>not json</html>"
        documents = body.get("documents" if self.shape == "cohere" else "texts")
        query = body.get("query")
        if not isinstance(query, str) or not isinstance(documents, list):
            missing = "documents" if self.shape == "cohere" else "texts"
            return 422, {}, json_body({"error": f"missing field `{missing}`", "error_type": "Validation"})
        scores = [self.scorer(query, str(document)) for document in documents]
        ranked = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)
        ranked = _misranked(mode, ranked, scores)
        if self.shape == "tei":
            ranked = ranked[:-1] if mode == "short" else ranked
            return 200, {}, json_body([{"index": i, "score": scores[i] if i < len(scores) else 0.0} for i in ranked])
        top_n = body.get("top_n")
        ranked = ranked[:top_n] if isinstance(top_n, int) else ranked
        if mode == "short":
            ranked = ranked[:-1]
        results = [{"index": i, "relevance_score": scores[i] if i < len(scores) else 0.0} for i in ranked]
        return 200, {}, json_body({"id": "fake", "results": results, "meta": {"billed_units": {"search_units": 1}}})


def _misranked(mode: str, ranked: list[int], scores: list[float]) -> list[int]:
    """The ranking a misbehaving server sends instead of ``ranked`` (``scores`` may be changed in place)."""
    if mode == "bad_index":
        return [len(scores) + 7, *ranked[1:]]
    if mode == "repeated":
        return [ranked[0], *ranked[:-1]]
    if mode == "nan":
        scores[ranked[0]] = float("nan")  # json.dumps writes NaN, as a careless server's encoder does
    return ranked
