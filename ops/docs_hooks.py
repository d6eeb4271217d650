"""MkDocs hook: the Configuration page's tables are generated from ``Settings`` at build time, so they cannot drift.

A page that holds the marker ``<!-- settings -->`` gets, in its place, one table per settings group: every
environment variable, its default, what it accepts and what it means (the field's docstring in
``memory_core/core/settings.py``).
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from memory_core.core.settings import Settings

MARKER = "<!-- settings -->"


def on_page_markdown(markdown: str, **_: Any) -> str:
    return markdown.replace(MARKER, settings_tables()) if MARKER in markdown else markdown


def settings_tables() -> str:
    sections = []
    for group, field in Settings.model_fields.items():
        model = field.annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(f"Settings.{group} is not a settings group")
        rows = ["| variable | default | accepts | meaning |", "|---|---|---|---|"]
        for name, inner in model.model_fields.items():
            variable = f"MEMORY_{group.upper()}__{name.upper()}"
            if not inner.description:  # fails the docs build: a new setting must say what it means
                raise ValueError(f"{variable} has no docstring in memory_core/core/settings.py")
            rows.append(f"| `{variable}` | {_default(inner)} | {_accepts(inner)} | {_cell(inner.description or '')} |")
        doc = " ".join((model.__doc__ or "").split())
        sections.append(f"### `MEMORY_{group.upper()}__*`\n\n{_cell(doc)}\n\n" + "\n".join(rows))
    return "\n\n".join(sections)


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:  # computed when the settings are read: its rule, not this machine's value
        extra = field.json_schema_extra
        shown = extra.get("shown_default") if isinstance(extra, dict) else None
        if not isinstance(shown, str):
            raise ValueError(f"{field} has a computed default and no shown_default to document it")
        return f"`{shown}`"
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, Path):
        value = str(value)
    text = json.dumps(value) if isinstance(value, list | bool) else str(value)
    return f"`{text}`"


def _accepts(field: FieldInfo) -> str:
    kind = str(field.annotation).replace("typing.", "").replace("pathlib.", "").replace("<class '", "")
    kind = kind.replace("'>", "").replace("pydantic.types.", "")
    if "SecretStr" in kind:
        kind = "secret"
    bounds = []
    for item in field.metadata:
        for attr, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤"), ("pattern", "matches")):
            bound = getattr(item, attr, None)
            if bound is not None:
                bounds.append(f"{sign} `{bound}`")
    return _cell(kind + (", " + ", ".join(bounds) if bounds else ""))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
