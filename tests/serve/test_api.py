"""The HTTP API on a real Serve server (real local Ray, free port, httpx): auth isolation,
422s that name the field, the submit/list/get/cancel round trip, /metrics, /docs."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from actors.quota import QuotaAllocatorActor
from clusters.simfleet import SimulatedFleet
from controlplane.clock import SimClock
from controlplane.controller import Controller, ControllerSettings
from controlplane.models import ForecastRow, JobState
from controlplane.store import Store
from tests.support import free_port

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ADMIN = "spa_test-admin-token"
REPO = Path(__file__).resolve().parents[2]


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


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _requests(fams: dict[str, Any], route: str, status: str, kind: str = "_total") -> float:
    name = "spotplane_api_requests" if kind == "_total" else "spotplane_api_request_duration_seconds"
    return sum(s.value for s in fams[name].samples if s.name == name + kind
               and s.labels["route"] == route and s.labels.get("status", status) == status)


def test_metrics_scrape_counts_requests_and_has_every_dashboard_family(
        api: Api, data_root: Path, tmp_path: Path) -> None:
    """A real scrape after the controller ran the simulated fleet on the API's store: it parses,
    counts this replica's requests exactly, and names every family the Grafana dashboard asks for."""
    clock = SimClock(start=api.store.control_time())
    fleet = SimulatedFleet.from_options(clock=clock, data_dir=data_root, seed=5,
                                        state_path=tmp_path / "simfleet.db", spot_capacity=2)
    ctl = Controller(api.store, fleet, clock, ControllerSettings(pool_nodes={"V100": 6, "H100": 2}),
                     epoch=api.store.take_controller_lease())
    ctl.tick()
    for i in range(3):
        _submit(api.beta, name=f"gang{i}", workers=2, accelerator="V100", compute_hours=3.0)
    _submit(api.acme, name="dl", kind="deadline", compute_hours=1.0, deadline_hours=3.0)
    for i in range(2):  # 16 GPUs each: beta's limit lets one run, the other waits in the queue
        _submit(api.beta, name=f"big{i}", accelerator="H100", gpus_per_worker=8, workers=2,
                compute_hours=50.0)
    for k in range(10 * 60):
        clock.advance(60.0)
        ctl.tick()
        if k == 60:
            _submit(api.acme, name="urgent", kind="hp", workers=4, accelerator="V100",
                    compute_hours=0.5)
    QuotaAllocatorActor(str(api.store.path), {"V100": 6, "H100": 2}, {"V100": 1, "H100": 8}
                        ).update({"V100": ([[2.0]], [[0.5]])}, now=clock.now())
    api.store.put_forecasts([ForecastRow(tenant_id=api.acme_id, at=clock.now() - 1800.0,
                                         horizon_hours=2, mean=[2.0, 2.0], upper=[3.0, 3.0])])
    ctl.tick()
    with api.client(None) as anon:
        before = _families(anon.get("/metrics").text)
        for _ in range(3):
            assert api.beta.get("/v1/jobs/job-nope").status_code == 404
        r = anon.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    fams = _families(r.text)
    route = "/v1/jobs/{job_id}"
    assert _requests(fams, route, "404") - _requests(before, route, "404") == 3
    assert _requests(fams, "/metrics", "200") - _requests(before, "/metrics", "200") == 1
    assert (_requests(fams, route, "", "_count") - _requests(before, route, "", "_count")) == 3
    stored = len(api.store.list_jobs(None, limit=100_000))
    assert fams["spotplane_jobs_submitted"].samples[0].value == stored
    assert sum(s.value for s in fams["spotplane_jobs"].samples) == stored
    queued = api.store.list_jobs(None, state=JobState.QUEUED, limit=100_000)
    assert queued and sum(s.value for s in fams["spotplane_queue_depth"].samples) == len(queued)
    # every family a dashboard query names has samples in this scrape
    dash = json.loads((REPO / "docs/grafana/spotplane.json").read_text())
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    assert [p["title"] for p in dash["panels"] if p["type"] == "row"] and panels
    sampled = {s.name for f in fams.values() for s in f.samples}
    for p in panels:
        assert p["targets"] and p["datasource"]["type"] == "prometheus", p["title"]
        for t in p["targets"]:
            names = set(re.findall(r"spotplane_[a-z0-9_]+", t["expr"]))
            assert names and names <= sampled, (p["title"], names - sampled)
