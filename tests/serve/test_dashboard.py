"""The web dashboard in a real headless Chromium (the distribution's, driven by Playwright) against
the real control plane (actors on a real local Ray, simulated fleet) and the real Serve API: log
in, watch the jobs table fill and change state, a deadline job's decision trace, tenant isolation
in the DOM and on the wire, a wrong token, screenshots and a clean console."""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serve.browser import CHROMIUM, CHROMIUM_ARGS, need_browser
from tests.support import free_port, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]
seen = functools.partial(wait_until, poll=0.3)  # the page's state, a few times a second

ADMIN = "spa_dashboard-test-admin"
WAIT_MS = 60_000


@pytest.fixture(scope="module")
def control_plane(ray_cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:  # type: ignore[no-untyped-def]
    from actors.runtime import RuntimeSettings, start_control_plane, stop_control_plane
    from controlplane.reconcile.contracts import ControllerSettings
    from serve.app import start_api, stop_api

    state = Path(tmp_path_factory.mktemp("dashboard")) / "state"
    settings = RuntimeSettings(state_dir=state, speed=1800.0, namespace="spotplane-dashboard-test",
                               detached=False, controller=ControllerSettings(pool_nodes={"V100": 6}))
    handles = start_control_plane(settings)
    try:
        yield start_api(settings.db_path, ADMIN, free_port())
    finally:
        stop_api()
        stop_control_plane(handles)


class Recorder:
    """The page's console errors and its /v1 responses, per phase of the test."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.responses: list[Any] = []

    def on_console(self, msg: Any) -> None:
        if msg.type == "error":
            self.errors.append(msg.text)

    def on_response(self, response: Any) -> None:
        if "/v1/" in response.url:
            self.responses.append(response)

    def bodies(self) -> list[str]:
        out = []
        for r in self.responses:
            try:
                out.append(r.text())
            except Exception:  # noqa: BLE001 - a body the browser has dropped cannot leak either
                out.append("")
        return out


def test_dashboard_in_a_real_browser(control_plane: str, tmp_path: Path) -> None:
    sync_playwright = need_browser()
    url = control_plane
    admin = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
    tokens, ids = {}, {}
    for name in ("acme", "beta"):
        r = admin.post("/v1/tenants", json={"name": name, "max_gpus": 16})
        assert r.status_code == 201, r.text
        tokens[name], ids[name] = r.json()["token"], r.json()["tenant"]["id"]
    acme = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens['acme']}"}, timeout=30)
    beta = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens['beta']}"}, timeout=30)
    beta_job = beta.post("/v1/jobs", json={"name": "beta-etl", "kind": "spot", "accelerator": "V100",
                                           "compute_hours": 1.0}).json()["id"]
    # gamma's HP job gives the forecaster demand history: quota refreshes, capacity points
    r = admin.post("/v1/tenants", json={"name": "gamma", "max_gpus": 16})
    assert r.status_code == 201, r.text
    gamma = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {r.json()['token']}"}, timeout=30)
    assert gamma.post("/v1/jobs", json={"name": "serving", "kind": "hp", "accelerator": "V100",
                                        "compute_hours": 500.0}).status_code == 201
    shots: list[Path] = []
    rec = Recorder()

    def shot(page: Any, name: str) -> None:
        path = tmp_path / f"dashboard-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 5_000, name
        shots.append(path)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(WAIT_MS)
            page.on("console", rec.on_console)
            page.on("pageerror", lambda exc: rec.errors.append(f"page error: {exc}"))
            page.on("response", rec.on_response)

            # -- acme logs in; the jobs table fills and changes state without a reload ---------
            page.goto(url + "/")
            page.wait_for_selector("#login:not([hidden])")
            shot(page, "login")
            page.fill("#token", tokens["acme"])
            page.click("#login button[type=submit]")
            page.wait_for_selector("#overview .jobs-by-state")
            assert page.inner_text("#who") == "tenant acme"
            page.click("#nav >> text=Jobs")
            page.wait_for_selector("#jobs-info:has-text('no jobs')")
            loaded_at = page.evaluate("performance.timeOrigin")
            dl = acme.post("/v1/jobs", json={"name": "finetune", "kind": "deadline", "accelerator": "V100",
                                             "compute_hours": 1.5, "deadline_hours": 2.5}).json()
            spot = acme.post("/v1/jobs", json={"name": "etl", "kind": "spot", "accelerator": "V100",
                                               "compute_hours": 3.0}).json()
            row = f"#jobs tr[data-job='{spot['id']}']"
            page.wait_for_selector(row)
            first = page.inner_text(f"{row} td.state")
            seen(lambda: page.inner_text(f"{row} td.state") != first, 60, f"the etl row to leave {first}")
            assert page.inner_text("#jobs-info") == "1-2 of 2"
            assert page.evaluate("performance.timeOrigin") == loaded_at  # refreshed in place
            page.click("th[data-sort=kind]")  # sortable: deadline before spot
            page.wait_for_selector("th.sorted-asc[data-sort=kind]")
            seen(lambda: page.get_attribute("#jobs tbody tr:first-child", "data-job") == dl["id"], 10,
             "the jobs sorted by kind")
            shot(page, "jobs")

            # -- the deadline job: timeline and decision trace against Uniform Progress ----------
            page.click(f"#jobs a[href='#/job/{dl['id']}']")
            page.wait_for_selector("#decision-trace path.uniform-progress")
            seen(lambda: page.get_attribute("#decision-trace path.trace", "d").count("L") >= 1, 60,
             "the decision trace to have a decision and the current point")
            assert page.locator("#decision-trace circle.decision[data-action=spot], "
                                "#decision-trace circle.decision[data-action=on_demand]").count() >= 1
            assert page.locator("#timeline rect[data-state=RUNNING]").count() >= 1 or \
                page.locator("#timeline rect[data-state=STARTING]").count() >= 1
            assert page.locator("#events tbody tr").count() >= 2
            shot(page, "job")
            # a job that runs code shows its logs (none yet: this API runs no workload cluster)
            run = acme.post("/v1/jobs", json={"name": "byo", "compute_hours": 1.0,
                                              "entrypoint": "python train.py"}).json()
            page.evaluate(f"location.hash = '#/job/{run['id']}'")
            page.wait_for_selector("#job-logs")
            assert page.inner_text("#job-logs") == "(no output yet)"

            for name in ("overview", "capacity", "fleet"):
                page.click(f"#nav a[href='#/{name}']")
                page.wait_for_selector({"overview": "#nodes-now", "capacity": "#quotas",
                                        "fleet": "#zones tbody tr"}[name])
                if name == "capacity":
                    _check_capacity(page, admin, demand=False)
                shot(page, name)
            assert page.locator("#zones tbody tr").count() >= 2
            assert rec.errors == [], rec.errors

            # -- beta never sees acme's jobs: not in the DOM, not on the wire ------------------
            page.click("#logout")
            page.wait_for_selector("#login:not([hidden])")
            rec.responses.clear()
            page.fill("#token", tokens["beta"])
            page.click("#login button[type=submit]")
            page.wait_for_selector("#overview .jobs-by-state")
            page.click("#nav >> text=Jobs")
            page.wait_for_selector(f"#jobs tr[data-job='{beta_job}']")
            assert page.locator("#jobs tbody tr").count() == 1
            for name in ("overview", "fleet"):
                page.click(f"#nav a[href='#/{name}']")
                page.wait_for_selector({"overview": "#nodes-now", "fleet": "#zones"}[name])
            html = page.content()
            bodies = rec.bodies()
            assert len(bodies) >= 6 and any(beta_job in b for b in bodies)
            for secret in (dl["id"], spot["id"], ids["acme"], "finetune"):
                assert secret not in html
                assert not any(secret in b for b in bodies), secret
            assert rec.errors == [], rec.errors

            # -- the admin's Capacity page: the pool's HP demand and its upper bound too ---------
            page.click("#logout")
            page.wait_for_selector("#login:not([hidden])")
            page.fill("#token", ADMIN)
            page.click("#login button[type=submit]")
            page.wait_for_selector("#overview .jobs-by-state")
            assert page.inner_text("#who") == "admin"
            # the login tells the admin by /v1/tenants/me's 403 (the admin is no tenant), which
            # the browser logs as a failed resource: that line, and nothing else
            assert rec.errors == ["Failed to load resource: the server responded with a status of 403 "
                                  "(Forbidden)"], rec.errors
            rec.errors.clear()
            page.click("#nav a[href='#/capacity']")
            _check_capacity(page, admin, demand=True)
            shot(page, "capacity-admin")
            assert rec.errors == [], rec.errors

            # -- a wrong token: a clear message, and back at the login form ----------------------
            page.click("#logout")
            page.fill("#token", "spt_not-a-token")
            page.click("#login button[type=submit]")
            page.wait_for_selector("#login-error:has-text('not accepted')")
            assert page.inner_text("#login-error") == (
                "That token was not accepted (unknown token). Use a tenant's token or the admin "
                "token in the file `spotplane up` names (STATE/admin-token).")
            assert page.evaluate("sessionStorage.getItem('spotplane.token')") is None
            shot(page, "wrong-token")
            # the one console line: the browser reporting the API's 401
            assert rec.errors and all("401" in e for e in rec.errors), rec.errors
        finally:
            browser.close()
    for client in (admin, acme, beta, gamma):
        client.close()
    notes = os.environ.get("SPOTPLANE_SCREENSHOTS")
    if notes:
        for path in shots:
            shutil.copy(path, Path(notes) / path.name)
    assert {p.name for p in shots} == {f"dashboard-{n}.png" for n in
                                       ("login", "jobs", "job", "overview", "capacity",
                                        "capacity-admin", "fleet", "wrong-token")}


POOL = "#capacity-pools .capacity-pool[data-pool='default/V100']"
# read in one go (the page redraws every 2 s): points drawn, and per chart and series the path's
# segments and the circles
DRAWN = """(pool) => {
  const card = document.querySelector(pool);
  if (!card) return null;
  const out = { points: Number(card.dataset.points), series: {} };
  for (const svg of card.querySelectorAll("svg")) for (const path of svg.querySelectorAll("path[data-series]")) {
    const name = path.dataset.series;
    out.series[svg.getAttribute("class") + ":" + name] = [(path.getAttribute("d").match(/L/g) || []).length,
      svg.querySelectorAll(`circle[data-series="${name}"]`).length];
  }
  return out;
}"""


def _check_capacity(page: Any, admin: httpx.Client, *, demand: bool) -> None:
    """The V100 pool's card draws every history point of the page's window: spot quota and
    capacity (GPUs), eta and H, and for the admin the HP demand and its upper bound."""
    drawn = seen(lambda: (d := page.evaluate(DRAWN, POOL)) and d["points"] >= 3 and d, 90,
              "three quota refreshes drawn on the Capacity page")
    n = drawn["points"]
    history = admin.get("/v1/capacity/history", params={"accelerator": "V100", "limit": 500}).json()["items"]
    assert len(history) >= n  # the API has at least what the page drew
    want = {"capacity-gpus:spot quota", "capacity-gpus:capacity", "capacity-eta:η (Eq. 11)",
            "capacity-eta:guarantee hours H"}
    if demand:
        want |= {"capacity-gpus:HP demand (forecast)", "capacity-gpus:HP demand upper bound"}
    assert drawn["series"] == {name: [n - 1, n] for name in want}, drawn
    assert any((p["hp_demand_upper_gpus"] or 0) > 0 for p in history)
    assert all(p["guarantee_hours"] == 1 and p["capacity_gpus"] == 6 for p in history)
