"""Debian's Chromium under Selenium, headless: the browser the console's tests and screenshots drive.

Never a downloaded browser or driver: the binary and the driver are Debian's (``ops/install-browser``
installs them), and Selenium Manager is told to stay offline, so a missing one is an error naming it rather
than a download.
"""

from __future__ import annotations

import os
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

BROWSER = Path("/usr/bin/chromium")
DRIVER = Path("/usr/bin/chromedriver")
WIDTH, HEIGHT = 1280, 800


def missing() -> str | None:
    """Why the browser cannot run here (None: it can)."""
    absent = [str(path) for path in (BROWSER, DRIVER) if not os.access(path, os.X_OK)]
    if absent:
        return (
            f"{' and '.join(absent)} missing: the browser tests drive Debian's chromium and chromium-driver "
            "(ops/install-browser installs them as root; or apt-get install chromium chromium-driver)"
        )
    return None


def chrome(*, width: int = WIDTH, height: int = HEIGHT) -> webdriver.Chrome:
    """A headless Chromium of ``width`` x ``height`` CSS pixels; quit it when done."""
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager: never fetch a browser or driver
    options = webdriver.ChromeOptions()
    options.binary_location = str(BROWSER)
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root, where Chromium's sandbox does not start
        "--disable-dev-shm-usage",  # containers' /dev/shm is small
        f"--window-size={width},{height}",
        "--force-device-scale-factor=1",
        "--hide-scrollbars",
        "--disable-extensions",
        "--disable-background-networking",  # no request but the page's own: the tests count them
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--no-default-browser-check",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(str(DRIVER)))
    # The window's size is not the page's: make the viewport (and so every screenshot) exactly this size.
    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    return driver
