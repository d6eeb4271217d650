"""Optional redaction of personal data, applied in the worker before anything is embedded or stored.

Off by default (``MEMORY_REDACTION__ENABLED=true`` turns it on). The default recognizers
replace e-mail addresses, phone numbers and card-like numbers (13-19 digits passing the
Luhn check) with typed placeholders, so a memory keeps its meaning ("call [PHONE]") but
not the data. Item values, chat message contents and string metadata values are redacted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
_CARD = re.compile(r"\b(?:\d[ -]?){12,18}\d\b")
_PHONE = re.compile(r"(?<![\w+(])(?:\+|\()?\d[\d ().-]{5,}\d\b")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{1,2}[./-]\d{1,2}[./-]\d{2,4}")


def _luhn(digits: str) -> bool:
    total, odd = 0, True
    for char in reversed(digits):
        n = int(char)
        if not odd:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
        odd = not odd
    return total % 10 == 0


def _cards(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        digits = re.sub(r"\D", "", match.group())
        return "[CARD]" if 13 <= len(digits) <= 19 and _luhn(digits) else match.group()

    return _CARD.sub(replace, text)


def _phones(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        digits = re.sub(r"\D", "", match.group())
        if _DATE.fullmatch(match.group().strip()) or not 7 <= len(digits) <= 15:
            return match.group()
        return "[PHONE]"

    return _PHONE.sub(replace, text)


RECOGNIZERS: dict[str, Callable[[str], str]] = {
    "email": lambda text: _EMAIL.sub("[EMAIL]", text),
    "card": _cards,  # before phones: a card number also looks like a long phone number
    "phone": _phones,
}


class Redactor:
    """Applies the chosen recognizers, in a fixed order, to text and to the strings inside metadata."""

    def __init__(self, kinds: Iterable[str] = ("email", "card", "phone")) -> None:
        self._steps = [RECOGNIZERS[kind] for kind in RECOGNIZERS if kind in set(kinds)]

    def text(self, value: str) -> str:
        """``value`` with every recognized datum replaced by its placeholder."""
        for step in self._steps:
            value = step(value)
        return value

    def data(self, value: Any) -> Any:
        """Redacts every string inside a JSON-like value (dict keys are left alone)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.data(v) for v in value]
        if isinstance(value, dict):
            return {k: self.data(v) for k, v in value.items()}
        return value
