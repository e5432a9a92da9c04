"""Budgets and bills through the API without Ray (``tests.serve.bareapi``): the admin sets a
tenant's limits, a tenant sees its spend and headroom, a deadline job whose cheapest plan does
not fit its max_cost or its tenant's headroom is refused with a 422 that names the field, states
the estimate and the limit, and says the fix; bills come as JSON and CSV."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from controlplane.core.readmodels import ZoneInfo
from tests.serve.bareapi import BareApi, bare_api

SPOT, ON_DEMAND = 0.918, 3.06  # $/h of one 1x V100 node in the one zone below


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BareApi]:
    with bare_api(tmp_path_factory.mktemp("budgets")) as built:
        built.replica.service.base_store.put_zones([ZoneInfo(
            cloud="aws", zone="us-west-2b", instance_type="p3.2xlarge", accelerator="V100",
            accelerator_count=1, spot_price=SPOT, on_demand_price=ON_DEMAND,
            spot_available=True, updated_at=0.0)])
        yield built


@pytest.fixture(autouse=True)
def no_limits(api: BareApi) -> Iterator[None]:
    """Each test starts and ends with the tenant's limits cleared (tests run in any order)."""
    clear = lambda: api.client(api.admin_token).put(  # noqa: E731
        f"/v1/tenants/{api.tenant_id}/budget", json={})
    assert clear().status_code == 200
    yield
    assert clear().status_code == 200


def _deadline(**extra: Any) -> dict[str, Any]:
    return {"name": "d", "kind": "deadline", "compute_hours": 10.0, "overhead_hours": 0.05,
            "deadline_hours": 20.0, "workers": 2, "accelerator": "V100", **extra}


def test_the_admin_sets_a_budget_and_the_tenant_sees_its_headroom(api: BareApi) -> None:
    admin, tenant = api.client(api.admin_token), api.client(api.tenant_token)
    r = admin.put(f"/v1/tenants/{api.tenant_id}/budget",
                  json={"hourly_cap": 5.0, "monthly_budget": 100.0})
    assert r.status_code == 200, r.text
    assert r.json()["monthly_headroom"] == 100.0 and r.json()["hourly_headroom"] == 5.0
    me = tenant.get("/v1/tenants/me").json()
    assert me["spend"]["monthly_budget"] == 100.0 and me["spend"]["month_spend"] == 0.0
    assert me["spend"]["monthly_level"] == "ok" and "token_hash" not in me
    assert tenant.put(f"/v1/tenants/{api.tenant_id}/budget",
                      json={"hourly_cap": 1e6}).status_code == 403


def test_a_bad_budget_gets_the_422_that_names_the_field(api: BareApi) -> None:
    r = api.client(api.admin_token).put(f"/v1/tenants/{api.tenant_id}/budget",
                                        json={"hourly_cap": -1.0})
    assert r.status_code == 422, r.text
    assert "hourly_cap" in r.text


def test_a_deadline_job_over_its_max_cost_is_refused_with_the_estimate(api: BareApi) -> None:
    # Uniform Progress on spot all along: 2 nodes x $0.918/h x (10 + 0.05) h = $18.4518
    r = api.client(api.tenant_token).post("/v1/jobs", json=_deadline(max_cost=10.0))
    assert r.status_code == 422, r.text
    err = r.json()["errors"][0] if "errors" in r.json() else r.json()
    text = str(r.json())
    assert "max_cost" in text and "$18.45 (uniform progress plan)" in text
    assert "max_cost of $10.00" in text and "raise max_cost to at least 18.45" in text, err


def test_no_slack_makes_the_on_demand_cost_the_bound(api: BareApi) -> None:
    # deadline = C + d: only on-demand finishes in time, 2 x $3.06/h x 10.05 h = $61.506
    r = api.client(api.tenant_token).post(
        "/v1/jobs", json=_deadline(deadline_hours=10.05, max_cost=60.0))
    assert r.status_code == 422, r.text
    assert "$61.51 (on demand plan)" in str(r.json())
    ok = api.client(api.tenant_token).post(
        "/v1/jobs", json=_deadline(deadline_hours=10.05, max_cost=61.6))
    assert ok.status_code == 201, ok.text


def test_a_deadline_job_over_the_monthly_headroom_is_refused(api: BareApi) -> None:
    admin, tenant = api.client(api.admin_token), api.client(api.tenant_token)
    assert admin.put(f"/v1/tenants/{api.tenant_id}/budget",
                     json={"monthly_budget": 15.0}).status_code == 200
    r = tenant.post("/v1/jobs", json=_deadline())
    assert r.status_code == 422, r.text
    text = str(r.json())
    assert "compute_hours" in text and "$18.45" in text and "headroom of $15.00" in text
    assert "raise monthly_budget" in text
    assert tenant.post("/v1/jobs", json=_deadline(compute_hours=5.0, deadline_hours=10.0)
                       ).status_code == 201  # 2 x 0.918 x 5.05 = $9.27 fits
    assert admin.put(f"/v1/tenants/{api.tenant_id}/budget", json={}).status_code == 200


def test_bills_come_as_json_and_csv(api: BareApi) -> None:
    tenant = api.client(api.tenant_token)
    assert tenant.post("/v1/jobs", json={"name": "s", "compute_hours": 1.0}).status_code == 201
    rows = tenant.get("/v1/bills").json()
    assert rows and all(abs(sum(b["lines"].values()) - b["total"]) < 1e-9 for b in rows)
    csv = tenant.get("/v1/bills", params={"format": "csv", "per": "tenant"})
    assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
    assert csv.text.splitlines()[0].startswith("month,tenant_id,job_id,job_name,jobs,spot_compute")
    job_id = rows[0]["job_id"]
    assert tenant.get(f"/v1/jobs/{job_id}/bill").json()["job_id"] == job_id


def test_metrics_carry_the_budget_gauges(api: BareApi) -> None:
    admin = api.client(api.admin_token)
    assert admin.put(f"/v1/tenants/{api.tenant_id}/budget",
                     json={"hourly_cap": 4.0, "monthly_budget": 50.0}).status_code == 200
    text = admin.get("/metrics").text
    assert (f'spotplane_tenant_budget_used_ratio{{limit="monthly",tenant="{api.tenant_id}"}} 0.0'
            in text)
    assert f'spotplane_tenant_budget_level{{limit="hourly",tenant="{api.tenant_id}"}} 0.0' in text
    assert admin.put(f"/v1/tenants/{api.tenant_id}/budget", json={}).status_code == 200


def test_a_bag_of_deadline_jobs_over_max_cost_names_the_templates_field(api: BareApi) -> None:
    r = api.client(api.tenant_token).post("/v1/bags", json={
        "name": "sweep", "template": _deadline(max_cost=10.0), "params": [{"lr": 0.1}]})
    assert r.status_code == 422, r.text
    assert "template.max_cost" in r.text and "$18.45" in r.text
