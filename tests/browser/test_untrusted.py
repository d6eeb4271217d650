"""Untrusted strings render as inert text in a real browser: no dialog, no script, no element made from them,
no link or request anywhere but the console's own server, template syntax shown as typed.

Agents store whatever users say, so the hostile strings go in through the client, as an agent's would: as
item values, metadata keys and values, session messages, short-term state, a profile, and the facts formation
forms from a conversation; then every page that shows them is opened (and a correction made through the
console's own forms, whose confirmation page and audit log show them again)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

import pytest
from selenium.webdriver.common.by import By

from memory_core import ChatMessage, MessageRole
from tests.browser.conftest import OPERATOR, Deployment
from tests.browser.visitor import Visitor

VALUES = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "sum: {{7*7}}",
    "javascript:alert(1)",
    "</textarea><script>alert(4)</script>",
]
METADATA = {
    "link": "javascript:alert(1)",
    "homepage": "https://evil.example/pixel.png",
    "html": "<img src=x onerror=alert(2)>",
    "<script>alert(3)</script>": "a key",
    "template": "total: {{7*7}}",
}
KEY = "mallory"
BASE = f"/ui/ns/acme/keys/{KEY}"
SET = f"{BASE}/sets/hostile"
# No "/" in them: a path segment cannot hold one (an encoded one is decoded before routing).
IN_URLS = ["<img src=x onerror=alert(1)>", "<svg onload=alert(1)>", 'x"><script src=x>', "sum: {{7*7}}"]


@dataclass(frozen=True)
class Stored:
    ids: list[str]
    """The hostile items' ids, in the order of ``VALUES``."""
    op_id: str
    """The formation operation that formed facts of them."""
    fact: str
    """The first fact it formed."""


@pytest.fixture(scope="module")
def stored(deployment: Deployment) -> Stored:
    with deployment.client("acme") as client:
        memory = client.long_term("acme", KEY)
        ids = memory.get_or_create_memory_set("hostile", capacity=100).add(VALUES, metadatas=[METADATA] * len(VALUES))
        history = client.session("acme", "s-hostile", key=KEY)
        history.add_messages([ChatMessage(role=MessageRole.USER, content=value) for value in VALUES])
        with client.short_term("acme", KEY) as state:
            for number, value in enumerate(VALUES):
                state.set(f"note.n{number}", value)
        client.profile("acme", KEY).update({"name": VALUES[0], "homepage": METADATA["link"]})
        messages = [{"role": "user", "content": value, "id": f"hostile-{n}"} for n, value in enumerate(VALUES)]
        report = memory.remember(messages, wait=True)
        assert report.status == "done", report
        checkpoint = {"messages": VALUES, "link": METADATA["link"]}
        client.checkpoints("acme").put("t-hostile", checkpoint, metadata=METADATA)
    return Stored(ids, report.op_id, report.facts[0])


def test_a_hostile_key_name_in_the_url_is_shown_as_typed_and_runs_nothing(browser: Visitor):
    browser.sign_in("tok-acme")
    for name in IN_URLS:
        browser.open(f"/ui/ns/acme/keys/{quote(name, safe='')}")
        assert browser.not_inert([name]) == []
        assert browser.heading == name


def test_a_hostile_namespace_in_the_url_reaches_no_page_of_it(browser: Visitor):
    browser.sign_in(OPERATOR)
    for name in IN_URLS:
        browser.open(f"/ui/ns/{quote(name, safe='')}")
        assert browser.status in (400, 403, 404)  # not a name, or not granted: never a page
        assert browser.not_inert([]) == []


@pytest.mark.parametrize(
    ("page", "shown"),
    [
        pytest.param(SET, VALUES, id="set"),
        pytest.param(f"{SET}?contains=alert", [v for v in VALUES if "alert" in v], id="set-filtered"),
        pytest.param(f"{SET}/search?q=alert+script+textarea&limit=10", [VALUES[0], VALUES[4]], id="search"),
        pytest.param(f"{BASE}/sessions/s-hostile", VALUES, id="session"),
        pytest.param(f"{BASE}/state", VALUES, id="short-term"),
        pytest.param(f"{BASE}/profile", [VALUES[0], METADATA["link"]], id="profile"),
        pytest.param(f"{BASE}/facts", VALUES, id="facts"),
        pytest.param(f"{BASE}/recall?q=alert", [VALUES[0]], id="recall"),
        pytest.param(f"{BASE}/operations", [], id="formation-operations"),
        pytest.param(f"{BASE}/operations/{{op_id}}", VALUES, id="formation-operation"),
        pytest.param(f"{BASE}/facts/{{fact}}/history?set=facts", [VALUES[0]], id="fact-history"),
        pytest.param("/ui/ns/acme/threads/t-hostile", [*METADATA, *METADATA.values()], id="checkpoints"),
    ],
)
def test_stored_hostile_strings_are_shown_as_typed_and_run_nothing(
    browser: Visitor, stored: Stored, page: str, shown: list[str]
):
    browser.sign_in("tok-acme")
    browser.open(page.format(op_id=quote(stored.op_id, safe=""), fact=quote(stored.fact, safe="")))
    assert browser.status == 200, browser.text
    assert browser.not_inert(shown) == []


def test_an_items_page_shows_its_hostile_value_and_metadata_as_typed(browser: Visitor, stored: Stored):
    browser.sign_in("tok-acme")
    for item_id, value in zip(stored.ids, VALUES, strict=True):
        browser.open(f"{SET}/items/{quote(item_id, safe='')}")
        assert browser.status == 200, browser.text
        assert browser.not_inert([value, *METADATA, *METADATA.values()]) == []


def test_a_hostile_value_round_trips_through_the_correction_form_and_the_audit_log(browser: Visitor, stored: Stored):
    browser.sign_in("tok-acme")
    item = f"{SET}/items/{quote(stored.ids[4], safe='')}"  # the value that closes a textarea
    browser.open(f"{item}/edit")
    assert browser.not_inert([]) == []
    textarea = browser.driver.find_element(By.CSS_SELECTOR, "form textarea[name=value]")
    assert textarea.get_property("value") == VALUES[4]  # escaped once, not twice: an edit keeps what is there
    textarea.clear()
    textarea.send_keys("<svg onload=alert(5)> and {{7*7}}")
    browser.submit(textarea.find_element(By.XPATH, "ancestor::form"))
    assert browser.heading.startswith("Change the value"), browser.text
    assert browser.not_inert([VALUES[4], "<svg onload=alert(5)> and {{7*7}}"]) == []
    browser.submit(browser.driver.find_element(By.CSS_SELECTOR, "main form"))
    assert browser.path == item
    assert browser.not_inert(["<svg onload=alert(5)> and {{7*7}}", VALUES[4]]) == []  # the value, the history
    browser.open("/ui/ns/acme/audit")
    assert browser.not_inert([VALUES[4], "<svg onload=alert(5)> and {{7*7}}"]) == []
