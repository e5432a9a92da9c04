"""The dashboard's fair-share page in a real headless Chromium, over the API without Ray."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import uvicorn

from controlplane.reconcile.fairshare import META_KEY
from tests.serve.bareapi import bare_api
from tests.serve.test_dashboard import CHROMIUM, CHROMIUM_ARGS, _need_browser
from tests.support import free_port


def test_the_fair_share_page_shows_the_tenants_lines(tmp_path: Path) -> None:
    sync_playwright = _need_browser()
    with bare_api(tmp_path, tenant="team-a") as api:
        store = api.replica.service.base_store
        line = {"weight": 2.0, "nominal_gpus": 8.0, "entitled_gpus": 12.0, "held_gpus": 12.0,
                "borrowed_gpus": 4.0, "lent_gpus": 0.0}
        store.set_meta(META_KEY, json.dumps({"at": 0.0, "pools": {"V100": {api.tenant_id: line}}}))
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(api.app, host="127.0.0.1", port=port,
                                               log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + 30
            while not server.started and time.monotonic() < deadline:
                time.sleep(0.05)
            errors: list[str] = []
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
                try:
                    page = browser.new_page()
                    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                    page.on("pageerror", lambda exc: errors.append(str(exc)))
                    page.goto(f"http://127.0.0.1:{port}/")
                    page.wait_for_selector("#login:not([hidden])")
                    page.fill("#token", api.tenant_token)
                    page.click("#login button[type=submit]")
                    page.wait_for_selector("#nav:not([hidden])")
                    page.click("a[href='#/fairshare']")
                    rows = page.wait_for_selector("#fairshare-lines tbody tr", timeout=30_000)
                    assert rows is not None
                    text = page.inner_text("#fairshare-lines")
                finally:
                    browser.close()
        finally:
            server.should_exit = True
            thread.join(timeout=10)
    assert "team-a" in text and "V100" in text and "12.0" in text and "4.0" in text, text
    assert errors == []
