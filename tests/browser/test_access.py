"""Signing in and finding one's way, in a real browser: sign-in → scopes → key; the door's refusals (another
namespace's URL, a form without its CSRF token, a wrong token)."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By

from tests.browser.conftest import OPERATOR, Deployment
from tests.browser.visitor import Visitor


@pytest.fixture(scope="module")
def _stored(deployment: Deployment) -> None:
    """Two namespaces holding a set each: acme's key ``alice``, globex's key ``bob``."""
    for namespace, key in (("acme", "alice"), ("globex", "bob")):
        with deployment.client(namespace) as client:
            notes = client.long_term(namespace, key).get_or_create_memory_set("notes", capacity=50)
            notes.add([f"{key} prefers green tea", f"{key} lives in Lyon"])


@pytest.mark.usefixtures("_stored")
def test_the_operator_signs_in_and_walks_from_the_namespaces_to_a_keys_sets(browser: Visitor):
    browser.open("/ui/ns/acme")
    assert browser.path == "/ui/signin"  # nothing without a session
    browser.sign_in(OPERATOR)
    assert browser.path == "/ui/"
    assert browser.heading == "Namespaces"
    assert "corrections on" in browser.text
    assert {a.text for a in browser.find("main a")} >= {"acme", "globex"}
    browser.link("acme").click()
    browser.wait_until("the namespace page", lambda v: v.path == "/ui/ns/acme")
    row = browser.driver.find_element(By.XPATH, "//tr[td/a[text()='alice']]")
    assert [cell.text for cell in row.find_elements(By.TAG_NAME, "td")][:3] == ["alice", "1", "2"]
    browser.link("alice").click()
    browser.wait_until("the key page", lambda v: v.path == "/ui/ns/acme/keys/alice")
    assert browser.heading == "alice"
    assert [a.text for a in browser.find("table a")] == ["notes"]
    assert browser.link("notes").get_attribute("href") == f"{browser.origin}/ui/ns/acme/keys/alice/sets/notes"
    assert browser.violations() == []


@pytest.mark.usefixtures("_stored")
def test_a_namespace_token_sees_its_own_namespace_and_is_refused_another_ones_urls(browser: Visitor):
    browser.sign_in("tok-acme")
    assert browser.path == "/ui/ns/acme"  # straight to its namespace: there is no list of others to see
    assert "read only" not in browser.text  # MEMORY_CONSOLE__CORRECTIONS=all
    assert [a.text for a in browser.find("header nav a")] == ["acme"]
    for path in ("/ui/ns/globex", "/ui/ns/globex/keys/bob", "/ui/ns/nobody-has-this", "/ui/"):
        browser.open(path)
        if path == "/ui/":
            assert browser.path == "/ui/ns/acme"
            continue
        assert browser.status == 403, path
        assert "does not grant" in browser.text
        assert "bob" not in browser.text
    browser.open("/ui/ns/acme/keys/alice")
    assert browser.status == 200
    assert [a.text for a in browser.find("table a")] == ["notes"]


def test_a_wrong_token_is_refused_without_saying_why(browser: Visitor):
    browser.sign_in("tok-acme-but-not-quite")
    assert browser.path == "/ui/signin"
    assert browser.status == 401
    assert browser.find("[role=alert]")[0].text == "That did not work."
    browser.open("/ui/ns/acme")
    assert browser.path == "/ui/signin"


def test_a_post_without_its_csrf_token_is_refused_and_the_session_lives_on(browser: Visitor):
    browser.sign_in("tok-acme")
    form = browser.driver.find_element(By.CSS_SELECTOR, "form[action='/ui/signout']")
    browser.run("arguments[0].querySelector('input[name=csrf]').remove()", form)
    browser.submit(form)
    assert browser.status == 403
    assert "did not come from the console" in browser.text

    browser.open("/ui/ns/acme")
    form = browser.driver.find_element(By.CSS_SELECTOR, "form[action='/ui/signout']")
    browser.run("arguments[0].querySelector('input[name=csrf]').value = 'forged'", form)
    browser.submit(form)
    assert browser.status == 403

    browser.open("/ui/ns/acme")
    assert browser.status == 200  # still signed in: the refused forms changed nothing
    browser.submit(browser.driver.find_element(By.CSS_SELECTOR, "form[action='/ui/signout']"))
    assert browser.path == "/ui/signin"  # the real form signs out
    browser.open("/ui/ns/acme")
    assert browser.path == "/ui/signin"
