"""What a person does at the console, in a real browser: set → item → correct → the item's history and the
audit log show it; the search tester; a delete, confirmed; paging past the first page (htmx and without)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from tests.browser.conftest import Deployment
from tests.browser.visitor import Visitor

KEY = "carol"
NOTES = f"/ui/ns/acme/keys/{KEY}/sets/notes"
TEAS = ["Carol drinks green tea", "Carol is allergic to peanuts", "Carol runs on Tuesdays", "Carol lives in Lyon"]
LOG = f"/ui/ns/acme/keys/{KEY}/sets/log"
LOG_SIZE = 45


@dataclass(frozen=True)
class Stored:
    notes: list[str]
    """The ids of ``TEAS``, in order."""


@pytest.fixture(scope="module")
def stored(deployment: Deployment) -> Stored:
    with deployment.client("acme") as client:
        memory = client.long_term("acme", KEY)
        notes = memory.get_or_create_memory_set("notes", capacity=100).add(TEAS, metadatas=[{"source": "chat"}] * 4)
        log = memory.get_or_create_memory_set("log", capacity=1000)
        log.add([f"log line {n:02d}" for n in range(LOG_SIZE)])
    return Stored(notes)


def _rows(browser: Visitor) -> list[str]:
    """The values of the items table's rows, as shown."""
    return [cell.text for cell in browser.find("table.items tbody td.value:nth-child(2)")]


def test_from_the_set_to_an_item_a_correction_shows_in_its_history_and_the_audit_log(browser: Visitor, stored: Stored):
    browser.sign_in("tok-acme")
    browser.open(f"/ui/ns/acme/keys/{KEY}")
    browser.link("notes").click()
    browser.wait_until("the set page", lambda v: v.path == NOTES)
    assert sorted(_rows(browser)) == sorted(TEAS)
    browser.driver.find_element(By.XPATH, f"//tr[td[text()='{TEAS[3]}']]//a").click()
    item = f"{NOTES}/items/{stored.notes[3]}"
    browser.wait_until("the item page", lambda v: v.path == item)
    assert browser.find("pre.value")[0].text == TEAS[3]

    browser.driver.find_element(By.CSS_SELECTOR, f"a[href='{item}/edit']").click()
    browser.wait_until("the correction form", lambda v: v.path == f"{item}/edit")
    textarea = browser.driver.find_element(By.CSS_SELECTOR, "textarea[name=value]")
    textarea.clear()
    textarea.send_keys("Carol lives in Porto")
    browser.submit(textarea.find_element(By.XPATH, "ancestor::form"))
    assert browser.heading.startswith("Change the value")  # asks first: nothing written yet
    assert [pre.text for pre in browser.find(".change pre")] == [TEAS[3], "Carol lives in Porto"]
    confirming = browser.driver.current_window_handle
    browser.driver.switch_to.new_window("tab")
    browser.open(item)
    assert browser.find("pre.value")[0].text == TEAS[3]  # nothing written before the confirmation
    browser.driver.close()
    browser.driver.switch_to.window(confirming)

    browser.submit(browser.driver.find_element(By.CSS_SELECTOR, "main form"))
    assert browser.path == item
    assert browser.find("pre.value")[0].text == "Carol lives in Porto"
    history = browser.driver.find_element(By.CSS_SELECTOR, "table.audit tbody tr")
    _, who, what, target, before, after = (cell.text for cell in history.find_elements(By.TAG_NAME, "td"))
    assert who.startswith("token ")  # the token's id, never the token
    assert "tok-acme" not in browser.driver.page_source
    assert (what, before, after) == ("value", TEAS[3], "Carol lives in Porto")
    assert target.startswith(stored.notes[3])

    browser.open("/ui/ns/acme/audit")
    entry = browser.driver.find_element(By.CSS_SELECTOR, "table.audit tbody tr")
    assert TEAS[3] in entry.text
    assert "Carol lives in Porto" in entry.text
    entry.find_element(By.TAG_NAME, "a").click()
    browser.wait_until("the item from the audit log", lambda v: v.path == item)


def test_the_search_tester_ranks_the_matching_item_first_and_shows_each_rankers_part(browser: Visitor, stored: Stored):
    browser.sign_in("tok-acme")
    browser.open(NOTES)
    browser.link("search tester").click()
    browser.wait_until("the search tester", lambda v: v.path == f"{NOTES}/search")
    browser.driver.find_element(By.NAME, "q").send_keys("allergic to peanuts")
    browser.submit(browser.driver.find_element(By.CSS_SELECTOR, "main form"))
    assert browser.path.startswith(f"{NOTES}/search?q=allergic+to+peanuts")
    header = [cell.text for cell in browser.find("table.results thead th")]
    assert header[:8] == ["#", "item", "value", "score", "fused", "dense", "BM25", "context"]
    first = [cell.text for cell in browser.find("table.results tbody tr:first-child td")]
    assert first[2] == TEAS[1]
    assert first[6] != ""  # BM25 found it: the words are its own
    assert browser.violations() == []


def test_a_delete_asks_first_and_cancel_keeps_the_item(browser: Visitor, stored: Stored):
    browser.sign_in("tok-acme")
    item = f"{NOTES}/items/{stored.notes[2]}"
    browser.open(item)
    browser.submit(
        browser.driver.find_element(By.CSS_SELECTOR, "form.inline button.danger").find_element(By.XPATH, "..")
    )
    assert browser.heading.startswith("Delete")
    assert TEAS[2] in browser.text
    browser.link("cancel").click()
    browser.wait_until("the item again", lambda v: v.path == item)
    assert browser.find("pre.value")[0].text == TEAS[2]

    browser.submit(
        browser.driver.find_element(By.CSS_SELECTOR, "form.inline button.danger").find_element(By.XPATH, "..")
    )
    browser.submit(browser.driver.find_element(By.CSS_SELECTOR, "main form"))
    assert browser.path == NOTES
    assert TEAS[2] not in _rows(browser)
    browser.open(item)
    assert browser.status == 404
    browser.open("/ui/ns/acme/audit")
    assert "delete" in browser.driver.find_element(By.CSS_SELECTOR, "table.audit tbody tr").text


def _on_page(number: int) -> Callable[[Visitor], bool]:
    """Whether the set page says it shows page ``number``, and htmx (if it runs) has settled the swap."""
    return lambda browser: f"page {number}" in browser.find("#items p.muted")[0].text and _settled(browser)


def _settled(browser: Visitor) -> bool:
    return not browser.find(".htmx-request, .htmx-swapping, .htmx-settling, .htmx-added")


@pytest.mark.parametrize("htmx", [True, False], ids=["htmx", "without-script"])
def test_paging_past_the_first_page_and_back(browser: Visitor, stored: Stored, htmx: bool):
    browser.sign_in("tok-acme")
    browser.scripts(enabled=htmx)
    try:
        browser.open(f"{LOG}?order=asc")
        assert browser.run("return typeof window.htmx") == ("object" if htmx else "undefined")
        Select(browser.driver.find_element(By.NAME, "limit")).select_by_value("20")
        browser.driver.find_element(By.CSS_SELECTOR, "form.filters button[type=submit]").click()
        browser.wait_until("20 items", lambda v: len(_rows(v)) == 20 and _settled(v))
        loaded = browser.run("return performance.timeOrigin")
        seen = _rows(browser)
        assert seen[0] == "log line 00"
        for page in (2, 3):
            following = browser.find("a[rel=next]")
            assert following, f"no next link after page {page - 1}: {browser.find('#items')[0].text}"
            following[0].click()
            browser.wait_until(f"page {page}", _on_page(page))
            seen += _rows(browser)
        assert seen == [f"log line {n:02d}" for n in range(LOG_SIZE)]  # every item once, in order
        assert browser.find("a[rel=next]") == []
        assert "cursor=" in browser.path  # the page is a link (htmx pushes the same URL a click would load)
        # With htmx the items were swapped into the page it loaded; without, each page was a page.
        assert (browser.run("return performance.timeOrigin") == loaded) is htmx
        browser.driver.find_element(By.CSS_SELECTOR, "a[rel=prev]").click()
        browser.wait_until("page 2 again", _on_page(2))
        assert _rows(browser) == [f"log line {n:02d}" for n in range(20, 40)]
        assert browser.violations() == []
    finally:
        browser.scripts(enabled=True)
