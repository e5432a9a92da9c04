"""The dashboard's pages in a real headless Chromium (the distribution's, driven by Playwright):
the browser, the API without Ray served by uvicorn on a free port, and a logged-in page."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from tests.support import free_port, wait_until

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def need_browser() -> Any:
    """Playwright's sync API, or fail (under CI) / skip (elsewhere) when the browser is missing."""
    missing = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing = "the `playwright` package is not installed (`make venv`)"
    if missing is None and not CHROMIUM.exists():
        missing = f"{CHROMIUM} is missing (`make browser` installs the distribution's chromium)"
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    return sync_playwright


@contextmanager
def served(app: Any) -> Iterator[int]:
    """``app`` served by uvicorn on a free local port (the port), stopped on exit."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 30, "uvicorn up")
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def logged_in(browser: Any, port: int, token: str, errors: list[str], console: bool = True) -> Any:
    """A new page of the dashboard at ``port``, logged in with ``token``; the page's uncaught
    errors (and, with ``console``, its console errors) are appended to ``errors``."""
    page = browser.new_page()
    if console:
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"http://127.0.0.1:{port}/")
    page.wait_for_selector("#login:not([hidden])")
    page.fill("#token", token)
    page.click("#login button[type=submit]")
    page.wait_for_selector("#nav:not([hidden])")
    return page
