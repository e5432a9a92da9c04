"""The dashboard's Bills page and budget banner in a real headless Chromium, over the API
without Ray (``tests.serve.bareapi`` served by uvicorn on a free port): a stacked bar per tenant
and per job whose segments are the bill's lines, the export buttons, and the banner once a
tenant's spend is past its soft line."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from controlplane.core.counters import counter_key
from controlplane.core.models import JobSpec, JobState, TenantBudget
from tests.serve.bareapi import bare_api
from tests.serve.browser import CHROMIUM, CHROMIUM_ARGS, logged_in, need_browser, served

pytestmark = pytest.mark.slow


def test_the_bills_page_draws_each_bill_as_stacked_lines(tmp_path: Path) -> None:
    sync_playwright = need_browser()
    with bare_api(tmp_path) as api:
        store = api.replica.service.base_store
        job = store.submit_job(api.tenant_id, JobSpec(name="train", compute_hours=1.0), now=0.0)
        job.state = JobState.QUEUED
        job.bill = {"spot_compute": 3.0, "lost_work": 0.5, "checkpoint": 0.25,
                    "provisioning": 0.125}
        job.cost = 3.875
        month = time.strftime("%Y-%m", time.gmtime(store.control_time()))
        store.commit(jobs=[job], counters={counter_key("tenant_month_spend_dollars_total",
                                                       tenant=api.tenant_id, month=month): 9.0})
        store.set_budget(api.tenant_id, TenantBudget(monthly_budget=10.0))  # 9 of 10: soft
        errors: list[str] = []
        with served(api.app) as port, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = logged_in(browser, port, api.tenant_token, errors, console=False)
                page.set_default_timeout(30_000)
                page.click("#nav >> text=Bills")
                page.wait_for_selector("svg.bills-jobs")
                lines = page.eval_on_selector_all("svg.bills-jobs rect",
                                                  "rs => rs.map(r => r.dataset.line)")
                assert lines == ["spot_compute", "lost_work", "checkpoint", "provisioning"]
                assert page.locator("svg.bills-tenants rect").count() == 4
                assert "$3.88" in page.inner_text("#bills")  # 3.875 to the cent: 3.88
                banner = page.wait_for_selector("#budget-banner")
                assert banner is not None
                assert "monthly budget past its soft line, $9.00 of $10.00" in banner.inner_text()
                page.click("#nav >> text=Overview")
                page.click("#nav >> text=Bills")
                page.wait_for_selector("svg.bills-jobs")
                page.wait_for_timeout(500)  # every banner drawn
                assert page.locator("#budget-banner").count() == 1
                shot = Path(os.environ.get("SPOTPLANE_SHOTS", str(tmp_path))) / "bills.png"
                page.screenshot(path=str(shot), full_page=True)
                assert shot.stat().st_size > 5_000
            finally:
                browser.close()
    assert errors == []
