"""What the fake Messages API answers a formation request with: scripted replies first, then a small rule-based
"model" that behaves like one on plain statements, so tests and benchmarks run the real SDK and the real
worker end to end without a model.

The rules, per user message (assistant turns are left out, as the prompt asks):

* the same text as a known fact (case and spacing aside): ``same`` with that fact as target;
* the negation of a known fact ("I do not like tea" against "I like tea", either way): ``contradict``;
* "<subject> is <value>" where a known fact says "<subject> is <other value>": ``update``;
* anything else: ``add``.

Scripted replies (``FormationScript.push``) are returned as they are, in order: a dict is the tool input, the
string ``"no_tool"`` a text-only reply, any other string a raw (garbage) body.
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

_TAGGED = r"<{tag}>\n(.*?)</{tag}>"
_NEGATION = re.compile(r"\b(?:do not|does not|don't|doesn't|not|no longer|never)\b\s*", re.IGNORECASE)


def tagged_lines(text: str, tag: str) -> list[dict[str, Any]]:
    """The JSON lines between ``<tag>`` and ``</tag>`` of a prompt."""
    found = re.search(_TAGGED.format(tag=tag), text, flags=re.DOTALL)
    lines = found.group(1).splitlines() if found else []
    return [json.loads(line) for line in lines if line.strip()]


def _normal(text: str) -> str:
    return " ".join(text.lower().split()).rstrip(".!")


def _positive(text: str) -> str:
    plain = _NEGATION.sub("", _normal(text))
    return re.sub(
        r"\b(likes|loves|does|do)\b", lambda m: m.group(1).rstrip("s") if m.group(1) != "does" else "do", plain
    )


def _subject(text: str) -> str | None:
    head, sep, _ = _normal(text).partition(" is ")
    return head if sep else None


def decide(content: str, known: list[dict[str, Any]]) -> tuple[str, int | None]:
    """The decision the rules give ``content`` against the known facts, and its target's number."""
    text = _normal(content)
    for fact in known:
        if _normal(fact["text"]) == text:
            return "same", fact["number"]
    for fact in known:
        other = _normal(fact["text"])
        negated = bool(_NEGATION.search(text)) != bool(_NEGATION.search(other))
        if negated and _positive(other) == _positive(text):
            return "contradict", fact["number"]
    subject = _subject(text)
    for fact in known:
        if subject is not None and _subject(fact["text"]) == subject:
            return "update", fact["number"]
    return "add", None


def rule_based(prompt: str) -> dict[str, Any]:
    """The tool input the rules give for a formation prompt."""
    known = tagged_lines(prompt, "known_facts")
    facts = []
    for message in tagged_lines(prompt, "messages"):
        if message.get("role") != "user":
            continue
        content = str(message.get("content", "")).strip()
        decision, target = decide(content, known)
        words = re.findall(r"\b[A-Z][a-z]+\b", content)
        facts.append(
            {
                "text": content,
                "kind": "preference" if re.search(r"\b(like|love|prefer|hate)s?\b", content, re.IGNORECASE) else "fact",
                "entities": sorted(set(words) - {"I"}),
                "occurred_at": message.get("at"),
                "confidence": 0.9,
                "sources": [message["number"]],
                "decision": decision,
                "target": target,
            }
        )
    return {"facts": facts}


@dataclass
class FormationScript:
    """Scripted formation replies, then the rules."""

    replies: deque[Any] = field(default_factory=deque)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def push(self, *replies: Any) -> None:
        """Queues replies for the next formation requests, in order."""
        with self.lock:
            self.replies.extend(replies)

    def next(self, prompt: str) -> Any:
        """The next scripted reply, or the rules' answer to ``prompt``."""
        with self.lock:
            if self.replies:
                return self.replies.popleft()
        return rule_based(prompt)
