"""What the README and the docs state about the package, checked against the package itself.

A table that forgets an extra tells a newcomer the feature does not exist; these tests fail the moment
``pyproject.toml`` and the pages disagree.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL_PAGES = [ROOT / "README.md", ROOT / "docs" / "getting-started.md"]


def _user_extras() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return set(project["optional-dependencies"]) - {"dev"}


def _install_table(page: Path) -> str:
    """The rows of the page's first table whose header reads ``| install | gives |``."""
    text = page.read_text()
    start = text.index("| install | gives |")
    rows = []
    for line in text[start:].splitlines():
        if not line.startswith("|"):
            break
        rows.append(line)
    return "\n".join(rows)


@pytest.mark.parametrize("page", INSTALL_PAGES, ids=lambda p: p.name)
def test_the_install_table_names_every_extra_and_nothing_else(page: Path):
    named = set(re.findall(r"(?:`|memory-core)\[([a-z][a-z0-9-]*)\]", _install_table(page)))
    assert named == _user_extras(), f"{page.name}: the install table names {sorted(named)}"


def test_the_readme_does_not_call_a_shipped_door_unbuilt():
    not_yet = ROOT.joinpath("README.md").read_text().split("## Not yet built", 1)[1]
    for shipped in ("asyncio client", "HTTP API", "LangGraph", "LangChain", "OpenAI Agents", "RabbitMQ"):
        assert shipped not in not_yet, f"README lists {shipped!r} under 'Not yet built'"
