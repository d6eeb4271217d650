"""A person at the console, as the browser tests drive one: opens pages, signs in, submits forms, and reports
what the page did (its status, the requests it made, the Content-Security-Policy violations it caused)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

WAIT = 20.0
"""Seconds a page has to show what a test waits for (a worker answers in milliseconds; CI machines vary)."""

_WATCH = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__violations.push(event.violatedDirective + " " + (event.blockedURI || "inline"));
});
"""


def watch_violations(driver: webdriver.Chrome) -> None:
    """Records every Content-Security-Policy violation of every page the browser opens from now on (the
    script runs through the DevTools protocol, before the page's own, whatever the page's policy)."""
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": _WATCH})


class Visitor:
    """The browser at ``origin`` (``http://127.0.0.1:PORT``)."""

    def __init__(self, driver: webdriver.Chrome, origin: str) -> None:
        self.driver = driver
        self.origin = origin

    def forget_cookies(self) -> None:
        """Signed out, as a new visitor (every cookie of every path gone)."""
        self.driver.execute_cdp_cmd("Network.clearBrowserCookies", {})

    def scripts(self, *, enabled: bool) -> None:
        """Turns the pages' own scripts (htmx) off or on, as a browser without JavaScript (``run`` still works)."""
        self.driver.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": not enabled})

    def open(self, path: str) -> Visitor:
        self.driver.get(self.origin + path)
        return self

    @property
    def path(self) -> str:
        url = self.driver.current_url
        assert url.startswith(self.origin), url
        return url[len(self.origin) :]

    @property
    def status(self) -> int:
        """The HTTP status the current page was answered with."""
        return int(self.run("return performance.getEntriesByType('navigation')[0].responseStatus"))

    @property
    def text(self) -> str:
        return self.driver.find_element(By.TAG_NAME, "body").text

    @property
    def heading(self) -> str:
        return self.driver.find_element(By.TAG_NAME, "h1").text

    def run(self, script: str, *args: Any) -> Any:
        """``script`` in the page (through WebDriver, whatever the page's policy allows its own scripts)."""
        return self.driver.execute_script(script, *args)

    def find(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def link(self, text: str) -> WebElement:
        return self.driver.find_element(By.LINK_TEXT, text)

    def wait_until(self, what: str, predicate: Callable[[Visitor], bool]) -> None:
        """Waits for ``predicate(visitor)`` to hold; fails naming ``what`` and the page it was on."""
        deadline = time.monotonic() + WAIT
        while True:
            try:
                if predicate(self):
                    return
            except (NoSuchElementException, StaleElementReferenceException):
                pass  # the page is being loaded or swapped
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not seen within {WAIT} s on {self.driver.current_url}")
            time.sleep(0.05)

    def submit(self, form: WebElement) -> None:
        """Submits ``form`` with its own button, and waits for the page it leads to."""
        before = self.run("return performance.timeOrigin")
        form.find_element(By.CSS_SELECTOR, "button[type=submit], button:not([type])").click()
        self.wait_until("the next page", lambda v: v.run("return performance.timeOrigin") != before)
        self.wait_until("the page loaded", lambda v: v.run("return document.readyState") == "complete")

    def sign_in(self, token: str) -> None:
        self.open("/ui/signin")
        self.driver.find_element(By.ID, "token").send_keys(token)
        self.submit(self.driver.find_element(By.CSS_SELECTOR, "form[action='/ui/signin']"))

    # -- what the page did ------------------------------------------------------------

    def requests(self) -> list[str]:
        """Every URL the page loaded: the page itself, then its resources (scripts, styles, images, fetches)."""
        entries = "performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'))"
        return cast(list[str], self.run(f"return {entries}.map((e) => e.name)"))

    def violations(self) -> list[str]:
        """The Content-Security-Policy violations this page caused so far (``watch_violations``)."""
        return cast(list[str], self.run("return window.__violations || []"))

    def alert(self) -> str | None:
        """The text of an open JavaScript dialog (None: there is none)."""
        try:
            return self.driver.switch_to.alert.text
        except NoAlertPresentException:
            return None

    def not_inert(self, shown: list[str]) -> list[str]:
        """Every way the page failed to show untrusted ``shown`` strings as plain text: an empty list when it
        showed each literally and nothing in it ran, loaded or linked anywhere.

        The policy forbids inline script, so an unescaped ``<script>`` would not run anyway: what is checked
        is the page itself (no element made from the data, every string shown as typed), then what the
        browser did (no dialog, no request off the server, no policy violation)."""
        problems: list[str] = []
        dialog = self.alert()
        if dialog is not None:
            problems.append(f"a dialog opened: {dialog!r}")
            self.driver.switch_to.alert.dismiss()
        scripts = [element.get_attribute("src") for element in self.find("script")]
        if scripts != [f"{self.origin}/ui/static/htmx.min.js"]:
            problems.append(f"scripts besides htmx: {scripts}")
        made = self.run(
            "return Array.from(document.querySelectorAll('img, iframe, object, embed, svg, math, base, "
            "[onerror], [onload], [onclick], [style], [srcdoc]')).map((e) => e.outerHTML.slice(0, 120))"
        )
        if made:
            problems.append(f"elements made from the data: {made}")
        links = [element.get_attribute("href") or "" for element in self.find("[href]")]
        if off := [href for href in links if not href.startswith(f"{self.origin}/ui/")]:
            problems.append(f"links off the console: {off}")
        if off := [url for url in self.requests() if not url.startswith(f"{self.origin}/")]:
            problems.append(f"requests off the server: {off}")
        if violations := self.violations():
            problems.append(f"Content-Security-Policy violations: {violations}")
        text = self.text
        if hidden := [value for value in shown if value not in text]:
            problems.append(f"not shown as typed: {hidden}")
        templated = [value for value in shown if "{{7*7}}" in value and value != "{{7*7}}"]  # "49" alone: anywhere
        if evaluated := [value for value in templated if value.replace("{{7*7}}", "49") in text]:
            problems.append(f"template syntax was evaluated: {evaluated} shows 49")
        return problems
