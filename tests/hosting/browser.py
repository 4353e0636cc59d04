"""A real headless Chromium (Debian's chromium + chromium-driver, via Selenium) and a real HTTP server for the page tests."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from grader.hosting.api.app import create_app
from grader.hosting.context import ServerContext

CHROMIUM = os.environ.get("GRADER_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("GRADER_CHROMEDRIVER", "/usr/bin/chromedriver")


def require_chromium() -> None:
    """Skip without Chromium (scripts/setup-chromium.sh installs it); fail instead under CI=true."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not (os.path.isfile(p) or shutil.which(p))]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install -e '.[test]')")
    if missing:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"headless Chromium missing: {', '.join(missing)} (run scripts/setup-chromium.sh)")
        pytest.skip(f"headless Chromium missing: {', '.join(missing)} (scripts/setup-chromium.sh installs it)")


def new_driver(width: int = 1400, height: int = 900):  # type: ignore[no-untyped-def]
    """A fresh headless Chromium session (its own profile: no cookies shared with another driver)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def page_wait(driver, seconds: float, poll_frequency: float = 0.5):  # type: ignore[no-untyped-def]
    """A wait that polls through page changes: an element found on the page being left goes stale, and is looked up again."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds, poll_frequency=poll_frequency, ignored_exceptions=(StaleElementReferenceException,))


#: Below this width, :func:`sized_driver` emulates a phone rather than a narrow desktop window.
PHONE_WIDTH = 500


def sized_driver(width: int, height: int = 900):  # type: ignore[no-untyped-def]
    """Chromium as a desktop window ``width`` pixels wide, or (below :data:`PHONE_WIDTH`) as a phone of that width.

    A phone is Chromium's mobile emulation, so the page's viewport meta applies as on a phone
    (a desktop window has a minimum width of its own, and ignores the viewport meta).
    """
    driver = new_driver(max(width, 800), height)
    if width < PHONE_WIDTH:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 2, "mobile": True})
    else:
        driver.set_window_size(width, height)
    return driver


def full_page_screenshot(driver, path: str, width: int, limit: int = 4000) -> None:  # type: ignore[no-untyped-def]
    """A screenshot of the whole page (up to ``limit`` pixels high) at the driver's width."""
    height = min(int(driver.execute_script("return document.documentElement.scrollHeight")), limit)
    if width < PHONE_WIDTH:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": True})
    else:
        driver.set_window_size(width, height + (driver.execute_script("return window.outerHeight - window.innerHeight") or 0))
    driver.save_screenshot(path)


@contextmanager
def http_server(ctx: ServerContext) -> Iterator[str]:
    """The app of ``ctx`` served by uvicorn on a free loopback port, in a thread."""
    import uvicorn

    # Bound here on port 0 and handed to uvicorn: no window in which another socket could take a port chosen earlier.
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(ctx), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise AssertionError("the test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
