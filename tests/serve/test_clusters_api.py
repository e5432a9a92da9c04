"""The workload clusters' admin API on the real app over a real SQLite store, without Ray:
register, list, show, drain, remove; a tenant refused before its body is read; bad input a 4xx
naming the field and its fix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.cli import clusters as cli_clusters
from controlplane.cli.main import main
from controlplane.cli.up import register_local_cluster
from controlplane.store import Store
from tests.serve.bareapi import BareApi, bare_api

EAST = {"name": "aws-east", "cloud": "aws", "region": "us-east-1",
        "gcs_address": "10.0.0.5:6379", "dashboard_url": "http://10.0.0.5:8265",
        "token_ref": "/etc/spotplane/ray-east.token", "zones": ["us-east-1a", "us-east-1b"],
        "node_types": ["p5.48xlarge"]}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BareApi]:
    with bare_api(tmp_path_factory.mktemp("clusters")) as built:
        yield built


def test_register_list_show_drain_remove(api: BareApi) -> None:
    with api.client(api.admin_token) as http:
        r = http.post("/v1/clusters", json=EAST)
        assert r.status_code == 201, r.text
        assert r.json()["state"] == "active" and r.json()["token_ref"] == EAST["token_ref"]
        assert http.post("/v1/clusters", json=EAST).status_code == 409
        assert [c["name"] for c in http.get("/v1/clusters").json()] == ["aws-east"]
        assert http.get("/v1/clusters/aws-east").json()["region"] == "us-east-1"
        assert http.post("/v1/clusters/aws-east/drain").json()["state"] == "draining"
        assert http.delete("/v1/clusters/aws-east").status_code == 204
        missing = http.get("/v1/clusters/aws-east")
        assert missing.status_code == 404 and "spotplane clusters list" in missing.json()["fix"]


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/v1/clusters"), ("GET", "/v1/clusters"), ("GET", "/v1/clusters/aws-east"),
    ("POST", "/v1/clusters/aws-east/drain"), ("DELETE", "/v1/clusters/aws-east")])
def test_a_tenant_is_refused_every_cluster_route(api: BareApi, method: str, path: str) -> None:
    with api.client(api.tenant_token) as http:
        r = http.request(method, path, content=b"{not json")
    assert r.status_code == 403, r.text
    assert "admin" in r.json()["message"] + r.json()["fix"]


@pytest.mark.parametrize(("change", "field"), [
    ({"gcs_address": "no-port"}, "gcs_address"),
    ({"dashboard_url": "ftp://x:1"}, "dashboard_url"),
    ({"name": "Bad Name"}, "name"),
    ({"zones": ["ok", "not ok"]}, "zones"),
    ({"token": "secret"}, "token"),
])
def test_bad_input_is_a_422_naming_the_field(api: BareApi, change: dict, field: str) -> None:
    with api.client(api.admin_token) as http:
        r = http.post("/v1/clusters", json=EAST | change)
    assert r.status_code == 422, r.text
    errors = r.json()["errors"]
    assert any(field in e["field"] for e in errors), errors
    assert r.json()["fix"]


def test_metrics_carry_each_clusters_health(api: BareApi) -> None:
    with api.client(api.admin_token) as http:
        assert http.post("/v1/clusters", json=EAST | {"name": "gauge"}).status_code == 201
        for _ in range(3):  # unhealthy from the third failed check in a row
            api.replica.service.store.record_cluster_health(
                "gauge", healthy=False, nodes_alive=0, message="job API refused", at=5.0)
        text = http.get("/metrics").text
        http.delete("/v1/clusters/gauge")
    assert ('spotplane_workload_cluster_healthy{cloud="aws",cluster="gauge",region="us-east-1",'
            'state="unhealthy"} 0.0') in text


def test_up_registers_its_workload_ray_as_local_once(tmp_path: Path) -> None:
    db = tmp_path / "spotplane.db"
    workload = {"workload_address": "127.0.0.1:8265", "workload_gcs": "127.0.0.1:6379",
                "workload_token_path": str(tmp_path / "token")}
    register_local_cluster(db, workload)
    register_local_cluster(db, workload | {"workload_address": "http://127.0.0.1:9000"})
    store = Store(db)
    try:
        [local] = store.list_clusters()
    finally:
        store.close()
    assert (local.name, local.dashboard_url, local.gcs_address) == (
        "local", "http://127.0.0.1:9000", "127.0.0.1:6379")
    assert local.token_ref == workload["workload_token_path"]


def test_cli_clusters_add_sends_the_registration(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    sent: list[tuple[str, str, object]] = []

    class Client:
        def __enter__(self) -> Client:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def request(self, method: str, path: str, json_body: object = None) -> object:
            sent.append((method, path, json_body))
            return {**EAST, "state": "active", "nodes_alive": 0, "health_message": ""}

    monkeypatch.setattr(cli_clusters, "client_of", lambda args: Client())
    rc = main(["clusters", "add", "aws-east", "--cloud", "aws", "--region", "us-east-1",
               "--gcs-address", "10.0.0.5:6379", "--dashboard-url", "http://10.0.0.5:8265",
               "--token-ref", "/etc/spotplane/ray-east.token", "--zone", "us-east-1a",
               "--zone", "us-east-1b", "--node-type", "p5.48xlarge"])
    assert rc == 0 and sent == [("POST", "/v1/clusters", EAST)]
    assert "aws-east" in capsys.readouterr().out
    assert main(["clusters", "drain", "aws-east"]) == 0
    assert sent[-1][:2] == ("POST", "/v1/clusters/aws-east/drain")
