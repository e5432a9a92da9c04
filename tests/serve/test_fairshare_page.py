"""The dashboard's fair-share page in a real headless Chromium, over the API without Ray."""

from __future__ import annotations

import json
from pathlib import Path

from controlplane.reconcile.fairshare import META_KEY
from tests.serve.bareapi import bare_api
from tests.serve.browser import CHROMIUM, CHROMIUM_ARGS, logged_in, need_browser, served


def test_the_fair_share_page_shows_the_tenants_lines(tmp_path: Path) -> None:
    sync_playwright = need_browser()
    with bare_api(tmp_path, tenant="team-a") as api:
        store = api.replica.service.base_store
        line = {"weight": 2.0, "nominal_gpus": 8.0, "entitled_gpus": 12.0, "held_gpus": 12.0,
                "borrowed_gpus": 4.0, "lent_gpus": 0.0}
        store.set_meta(META_KEY, json.dumps({"at": 0.0, "pools": {"V100": {api.tenant_id: line}}}))
        errors: list[str] = []
        with served(api.app) as port, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = logged_in(browser, port, api.tenant_token, errors)
                page.click("a[href='#/fairshare']")
                rows = page.wait_for_selector("#fairshare-lines tbody tr", timeout=30_000)
                assert rows is not None
                text = page.inner_text("#fairshare-lines")
            finally:
                browser.close()
    assert "team-a" in text and "V100" in text and "12.0" in text and "4.0" in text, text
    assert errors == []
