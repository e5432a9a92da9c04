"""The HTTP API on a real Serve server (real local Ray, free port, httpx): auth isolation,
422s that name the field, the submit/list/get/cancel round trip, /metrics, /docs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from controlplane.models import JobState
from controlplane.store import Store
from tests.support import free_port

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ADMIN = "spa_test-admin-token"


@dataclass
class Api:
    url: str
    store: Store
    admin: httpx.Client
    acme: httpx.Client
    beta: httpx.Client
    acme_id: str
    beta_id: str

    def client(self, token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def api(ray_cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:  # type: ignore[no-untyped-def]
    from serve.app import start_api, stop_api

    db = Path(tmp_path_factory.mktemp("api")) / "spotplane.db"
    store = Store(db)
    url = start_api(db, ADMIN, free_port())
    admin = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
    tokens, ids = {}, {}
    for name in ("acme", "beta"):
        r = admin.post("/v1/tenants", json={"name": name, "max_gpus": 16})
        assert r.status_code == 201, r.text
        tokens[name], ids[name] = r.json()["token"], r.json()["tenant"]["id"]
    a = Api(url, store, admin, httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens['acme']}"}),
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens['beta']}"}),
            ids["acme"], ids["beta"])
    try:
        yield a
    finally:
        for c in (a.admin, a.acme, a.beta):
            c.close()
        stop_api()
        store.close()


def _submit(c: httpx.Client, **body: object) -> dict:
    spec = {"name": "train", "kind": "spot", "compute_hours": 2.0}
    spec.update(body)
    r = c.post("/v1/jobs", json=spec)
    assert r.status_code == 201, r.text
    return r.json()


# --------------------------------------------------------------------------------------------
def test_health_docs_and_openapi(api: Api) -> None:
    with api.client(None) as anon:
        assert anon.get("/healthz").json()["status"] == "ok"
        assert anon.get("/docs").status_code == 200
        paths = anon.get("/openapi.json").json()["paths"]
    for p in ("/v1/jobs", "/v1/jobs/{job_id}/cancel", "/v1/jobs/{job_id}/decisions", "/v1/bags",
              "/v1/fleet/nodes", "/v1/fleet/prices", "/v1/fleet/availability", "/v1/quotas",
              "/v1/forecasts", "/v1/cost", "/metrics", "/healthz", "/v1/tenants"):
        assert p in paths, p


def test_tokens_are_required_and_checked(api: Api) -> None:
    with api.client(None) as anon:
        r = anon.get("/v1/jobs")
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.json()["message"] == "missing bearer token"
    with api.client("sp_not-a-token") as wrong:
        assert wrong.get("/v1/jobs").status_code == 401
    # a tenant cannot create tenants; the token is stored hashed, never shown again
    r = api.acme.post("/v1/tenants", json={"name": "mallory"})
    assert r.status_code == 403
    assert "admin token" in r.json()["message"]
    tenants = api.admin.get("/v1/tenants").json()
    assert {t["name"] for t in tenants} >= {"acme", "beta"}
    assert all("token" not in t and "token_hash" not in t for t in tenants)


def test_tenants_never_see_each_others_jobs(api: Api) -> None:
    job = _submit(api.acme, name="secret-model")
    jid = job["id"]
    assert job["tenant_id"] == api.acme_id
    # beta: 404 on every path of acme's job, exactly as for a job that does not exist
    for method, path in (("GET", f"/v1/jobs/{jid}"), ("POST", f"/v1/jobs/{jid}/cancel"),
                         ("GET", f"/v1/jobs/{jid}/events"), ("GET", f"/v1/jobs/{jid}/decisions")):
        theirs = api.beta.request(method, path)
        nothing = api.beta.request(method, path.replace(jid, "job-doesnotexist"))
        assert theirs.status_code == nothing.status_code == 404, (method, path)
        assert theirs.json()["message"] == f"job {jid} not found"
    assert jid not in {j["id"] for j in api.beta.get("/v1/jobs").json()}
    assert api.beta.get("/v1/jobs", params={"tenant_id": api.acme_id}).json() == []
    # acme's job was not cancelled by beta's attempt
    assert api.acme.get(f"/v1/jobs/{jid}").json()["cancel_requested"] is False
    # the admin sees both tenants
    assert jid in {j["id"] for j in api.admin.get("/v1/jobs").json()}


def test_bags_are_tenant_scoped(api: Api) -> None:
    r = api.beta.post("/v1/bags", json={"name": "sweep", "template": {"name": "s", "compute_hours": 1.5},
                                        "params": [{"lr": 0.1}, {"lr": 0.01}, {"lr": 0.001}]})
    assert r.status_code == 201, r.text
    bag = r.json()
    assert len(bag["job_ids"]) == 3
    bid = bag["bag"]["id"]
    assert api.beta.get(f"/v1/bags/{bid}").json()["jobs"] == 3
    assert api.acme.get(f"/v1/bags/{bid}").status_code == 404
    assert bid not in {b["id"] for b in api.acme.get("/v1/bags").json()}
    listed = api.beta.get("/v1/jobs", params={"bag_id": bid}).json()
    assert sorted(j["id"] for j in listed) == sorted(bag["job_ids"])
    assert [j["spec"]["params"]["lr"] for j in listed] == [0.1, 0.01, 0.001]


@pytest.mark.parametrize(
    ("body", "field", "fix_contains"),
    [
        ({"name": "x", "kind": "deadline", "compute_hours": 2.0, "deadline_hours": 1.0},
         "deadline_hours", "raise deadline_hours"),
        ({"name": "x", "kind": "deadline", "compute_hours": 2.0}, "deadline_hours", "give deadline_hours"),
        ({"name": "x", "kind": "spot", "compute_hours": 2.0, "deadline_hours": 9.0}, "deadline_hours", "kind: deadline"),
        ({"name": "x", "compute_hours": 0}, "compute_hours", "above 0"),
        ({"name": "x", "compute_hours": 1, "gpus_per_worker": 8, "workers": 4}, "gpus_per_worker", "fewer workers"),
        ({"name": "x", "compute_hours": 1, "kind": "urgent"}, "kind", "'hp', 'spot' or 'deadline'"),
        ({"name": "x", "compute_hours": 1, "priority": 9}, "priority", "remove it"),
        ({"compute_hours": 1}, "name", "add `name`"),
        ({"name": "x", "compute_hours": "lots"}, "compute_hours", "send a number"),
        ({"name": "x", "compute_hours": 1, "bag_id": "bag-missing"}, "", ""),  # 404, see below
    ],
)
def test_bad_input_is_a_422_naming_the_field_and_never_stored(api: Api, body: dict, field: str,
                                                               fix_contains: str) -> None:
    before = len(api.store.list_jobs(None, limit=100_000))
    r = api.acme.post("/v1/jobs", json=body)
    if not field:
        assert r.status_code == 404 and "bag bag-missing not found" in r.json()["message"]
    else:
        assert r.status_code == 422, r.text
        err = r.json()["errors"][0]
        assert err["field"] == field
        assert fix_contains in err["fix"]
        assert r.json()["message"].startswith(f"{field}: ")
    assert len(api.store.list_jobs(None, limit=100_000)) == before


def test_unknown_accelerator_is_a_422_listing_the_known_ones(api: Api) -> None:
    from controlplane.models import ZoneInfo

    api.store.put_zones([
        ZoneInfo(cloud="aws", zone="us-east-1a", instance_type="p3.2xlarge", accelerator="V100",
                 accelerator_count=1, spot_price=0.918, on_demand_price=3.06, spot_available=True,
                 updated_at=0.0),
        ZoneInfo(cloud="gcp", zone="us-east4-a", instance_type="a3-highgpu-8g", accelerator="H100",
                 accelerator_count=8, spot_price=14.85, on_demand_price=82.53, spot_available=False,
                 updated_at=0.0),
    ])
    r = api.acme.post("/v1/jobs", json={"name": "x", "compute_hours": 1, "accelerator": "TPUv5"})
    assert r.status_code == 422
    assert r.json()["message"] == "accelerator: unknown accelerator 'TPUv5'; use one of H100, V100, or leave it null for any"
    assert _submit(api.acme, accelerator="H100")["spec"]["accelerator"] == "H100"
    prices = {p["zone"]: p for p in api.acme.get("/v1/fleet/prices").json()}
    assert prices["us-east-1a"]["spot_discount_pct"] == pytest.approx(70.0)
    avail = {a["zone"]: a["spot_available"] for a in api.acme.get("/v1/fleet/availability").json()}
    assert avail == {"us-east-1a": True, "us-east4-a": False}


def test_query_and_body_shape_errors(api: Api) -> None:
    r = api.acme.get("/v1/jobs", params={"state": "DONE"})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "state[0]"
    r = api.acme.get("/v1/jobs", params={"limit": 0})
    assert r.status_code == 422 and r.json()["message"] == "limit: must be >= 1; use a value of at least 1"
    r = api.acme.post("/v1/jobs", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and "JSON" in r.json()["fix"]
    r = api.admin.post("/v1/jobs", json={"name": "x", "compute_hours": 1})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "tenant_id"
    r = api.admin.post("/v1/tenants", json={"name": "bad name!"})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "name"


def test_submit_list_get_cancel_round_trip(api: Api) -> None:
    dl = _submit(api.acme, name="llm", kind="deadline", compute_hours=10.0, deadline_hours=14.0,
                 gpus_per_worker=2, workers=4)
    sp = _submit(api.acme, name="etl", kind="spot", compute_hours=1.0)
    assert dl["state"] == "PENDING" and dl["total_gpus"] == 8 and dl["progress_fraction"] == 0.0
    assert dl["deadline_at"] == pytest.approx(dl["submitted_at"] + 14.0 * 3600)
    got = api.acme.get(f"/v1/jobs/{dl['id']}").json()
    assert got["spec"]["compute_hours"] == 10.0 and got["spec"]["workers"] == 4
    deadline_ids = {j["id"] for j in api.acme.get("/v1/jobs", params={"kind": "deadline"}).json()}
    assert dl["id"] in deadline_ids and sp["id"] not in deadline_ids
    pending = {j["id"] for j in api.acme.get("/v1/jobs", params=[("state", "PENDING"), ("state", "QUEUED")]).json()}
    assert {dl["id"], sp["id"]} <= pending
    # cancel: accepted (202), recorded in the store for the controller's next tick
    r = api.acme.post(f"/v1/jobs/{sp['id']}/cancel")
    assert r.status_code == 202 and r.json()["cancel_requested"] is True
    assert sp["id"] in api.store.cancel_requests()
    assert api.acme.get(f"/v1/jobs/{sp['id']}").json()["cancel_requested"] is True
    # a finished job cannot be cancelled: 409 with the reason
    job = api.store.get_job(dl["id"])
    job.state = JobState.SUCCEEDED
    api.store.commit(jobs=[job])
    r = api.acme.post(f"/v1/jobs/{dl['id']}/cancel")
    assert r.status_code == 409
    assert r.json()["message"] == f"job {dl['id']} is already SUCCEEDED"


def test_paging_1000_jobs_through_the_api_returns_each_once(api: Api) -> None:
    from controlplane.models import JobSpec

    r = api.admin.post("/v1/tenants", json={"name": "pager", "max_gpus": 4})
    assert r.status_code == 201, r.text
    token, tid = r.json()["token"], r.json()["tenant"]["id"]
    ids = [j.id for j in api.store.submit_jobs(
        tid, [JobSpec(name=f"p{i}", compute_hours=1) for i in range(1000)], now=0.0)]
    seen: list[str] = []
    with api.client(token) as c:
        for offset in range(0, 1000, 300):
            page = c.get("/v1/jobs", params={"limit": 300, "offset": offset})
            assert page.status_code == 200, page.text
            assert len(page.json()) == min(300, 1000 - offset)
            seen += [j["id"] for j in page.json()]
        assert c.get("/v1/jobs", params={"limit": 300, "offset": 1000}).json() == []
    assert seen == ids  # oldest first, each job exactly once


def test_fleet_quota_cost_views(api: Api) -> None:
    for path in ("/v1/fleet/nodes", "/v1/fleet/zones", "/v1/fleet/prices", "/v1/fleet/availability",
                 "/v1/quotas", "/v1/forecasts"):
        r = api.acme.get(path)
        assert r.status_code == 200 and isinstance(r.json(), list), path
    cost = api.admin.get("/v1/cost").json()
    names = {t["tenant_name"] for t in cost["tenants"]}
    assert {"acme", "beta"} <= names
    own = api.beta.get("/v1/cost").json()
    assert [t["tenant_name"] for t in own["tenants"]] == ["beta"]
    assert api.acme.get("/v1/clock").json()["now"] == api.store.control_time()


def test_metrics_is_prometheus_text(api: Api) -> None:
    _submit(api.beta, name="counted")
    api.beta.get("/v1/jobs/job-nope")  # one 404
    with api.client(None) as anon:
        r = anon.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    fams = {f.name: f for f in text_string_to_metric_families(r.text)}
    stored = len(api.store.list_jobs(None, limit=100_000))
    assert fams["spotplane_jobs_submitted"].type == "counter"
    assert fams["spotplane_jobs_submitted"].samples[0].value == stored
    by_state = {s.labels["state"]: s.value for s in fams["spotplane_jobs"].samples}
    assert sum(by_state.values()) == stored
    errors = {s.labels["status"]: s.value for s in fams["spotplane_api_errors"].samples}
    assert errors["404"] >= 1 and errors["422"] >= 1 and errors["401"] >= 1
