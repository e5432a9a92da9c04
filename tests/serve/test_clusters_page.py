"""The dashboard's clusters page in a real headless Chromium, over the API without Ray
(``tests.serve.bareapi`` served by uvicorn on a free port): the admin sees every workload cluster
with its state, health age, nodes and running jobs and drains one from the page; a tenant sees
only the clusters its own jobs run on, and nothing of another tenant's. The per-cluster gauges
are on ``/metrics``."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.core.models import Job, JobSpec, JobState
from controlplane.core.workloadclusters import ClusterState, WorkloadCluster, WorkloadClusterSpec
from serve.routes.clusterview import cluster_rows
from tests.serve.bareapi import BareApi, bare_api
from tests.serve.browser import CHROMIUM, CHROMIUM_ARGS, logged_in, need_browser, served

pytestmark = pytest.mark.slow
FORBIDDEN_LOG = "Failed to load resource: the server responded with a status of 403 (Forbidden)"


def _world(api: BareApi) -> str:
    """Two clusters, one job of the page's tenant running in the east and one of another
    tenant in the west; the other tenant's token."""
    store = api.replica.service.base_store
    now = store.control_time()
    for name, region, zone in (("aws-east", "us-east-1", "us-east-1a"),
                               ("aws-west", "us-west-2", "us-west-2a")):
        store.add_cluster(WorkloadClusterSpec(name=name, cloud="aws", region=region,
                                              dashboard_url=f"http://{name}:8265", zones=[zone]))
        store.record_cluster_health(name, healthy=True, nodes_alive=3, message="", at=now - 30)
    other, other_token = store.create_tenant("team-b")
    for tenant, zone, name in ((api.tenant_id, "us-east-1a", "mine"),
                               (other.id, "us-west-2a", "theirs")):
        job = store.submit_job(tenant, JobSpec(name=name, compute_hours=1.0), now=now)
        job.state, job.zone, job.node_ids = JobState.RUNNING, zone, ["n-1", "n-2"]
        store.commit(jobs=[job])
    return other_token


def test_the_clusters_page_shows_every_cluster_to_the_admin_and_drains_one(
        tmp_path: Path) -> None:
    sync_playwright = need_browser()
    with bare_api(tmp_path, tenant="team-a") as api:
        _world(api)
        errors: list[str] = []
        with served(api.app) as port, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = logged_in(browser, port, api.admin_token, errors)
                # the login tells the admin by /v1/tenants/me's 403 (the admin is no tenant)
                assert errors == [FORBIDDEN_LOG], errors
                errors.clear()
                page.click("a[href='#/clusters']")
                page.wait_for_selector("#clusters-table tbody tr", timeout=30_000)
                rows = page.locator("#clusters-table tbody tr").all_inner_texts()
                page.click("button.drain[data-cluster='aws-east']")
                page.wait_for_selector("td.cluster-state[data-state='draining']", timeout=30_000)
                drained = page.locator("#clusters-table tbody tr").all_inner_texts()
            finally:
                browser.close()
        store = api.replica.service.base_store
        assert store.get_cluster("aws-east").state is ClusterState.DRAINING
    assert len(rows) == 2, rows
    east, west = sorted(rows)
    for row, region in ((east, "us-east-1"), (west, "us-west-2")):
        cells = row.split("\t")
        assert cells[:4] == [cells[0], "aws", region, "active"], cells
        assert cells[4].endswith("s ago") and cells[5] == "3" and cells[6] == "1", cells
    east_now = next(r for r in drained if r.startswith("aws-east"))
    assert "draining" in east_now and "finishing its jobs" in east_now
    assert errors == []


def test_a_tenant_sees_only_the_clusters_its_own_jobs_run_on(tmp_path: Path) -> None:
    sync_playwright = need_browser()
    with bare_api(tmp_path, tenant="team-a") as api:
        other_token = _world(api)
        with api.client(other_token) as theirs:
            assert theirs.get("/v1/clusters").status_code == 403
            assert [c["name"] for c in theirs.get("/v1/dashboard/clusters").json()] == ["aws-west"]
        errors: list[str] = []
        with served(api.app) as port, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = logged_in(browser, port, api.tenant_token, errors)
                page.click("a[href='#/clusters']")
                page.wait_for_selector("#clusters-table tbody tr", timeout=30_000)
                rows = page.locator("#clusters-table tbody tr").all_inner_texts()
                buttons = page.locator("button.drain").count()
            finally:
                browser.close()
    assert len(rows) == 1 and rows[0].startswith("aws-east"), rows
    cells = rows[0].split("\t")
    assert cells[5] == "2" and cells[6] == "1", cells  # its own job's nodes, not the cluster's
    assert "aws-west" not in rows[0] and buttons == 0
    assert errors == []


def test_metrics_carry_a_gauge_per_cluster(tmp_path: Path) -> None:
    with bare_api(tmp_path, tenant="team-a") as api:
        _world(api)
        with api.client(api.admin_token) as admin:
            text = admin.get("/metrics").text
    for name in ("aws-east", "aws-west"):
        assert f'spotplane_workload_cluster_nodes{{cluster="{name}"}} 3.0' in text
        assert any(line.startswith("spotplane_workload_cluster_healthy{")
                   and f'cluster="{name}"' in line for line in text.splitlines())


def test_a_job_counts_on_the_cluster_its_executor_named_else_the_one_of_its_zone() -> None:
    east, west = (WorkloadCluster(name=n, cloud="aws", region=r, dashboard_url=f"http://{n}:8265",
                                  zones=[z], nodes_alive=4, health_message="slow", checked_at=10.0)
                  for n, r, z in (("east", "us-east-1", "us-east-1a"),
                                  ("west", "us-west-2", "us-west-2a")))
    spec = JobSpec(name="j", compute_hours=1.0)
    by_zone = Job(id="a", tenant_id="t", name="j", kind=spec.kind, spec=spec, submitted_at=0.0,
                  zone="us-east-1a", node_ids=["n1"])
    named = Job(id="b", tenant_id="t", name="j", kind=spec.kind, spec=spec, submitted_at=0.0,
                zone="us-east-1a", cluster="west", node_ids=["n2", "n3"])
    admin = cluster_rows([east, west], [by_zone, named], 40.0, admin=True)
    assert [(r.name, r.jobs_running, r.nodes, r.health_age_s, r.health_message)
            for r in admin] == [("east", 1, 4, 30.0, "slow"), ("west", 1, 4, 30.0, "slow")]
    tenant = cluster_rows([east, west], [named], 40.0, admin=False)
    assert [(r.name, r.jobs_running, r.nodes, r.health_message) for r in tenant] == [
        ("west", 1, 2, "")]
