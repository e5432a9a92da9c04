"""A launched node's reports through the real FastAPI app (no Ray: ``tests.serve.bareapi``): its
launch's credential reports for its own instance; another node's credential, a tenant's token or
none are refused; what is accepted is kept for the controller."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.core.models import Market, Node, NodeState
from controlplane.core.nodecreds import node_credential, report_secret
from controlplane.core.tokens import hash_token
from tests.serve.bareapi import ADMIN_TOKEN, UNTHROTTLED, BareApi, bare_api

NOTICE = {"action": "terminate", "seconds_left": 110.0, "raw": "{}"}
FAILED = {"reason": "bootstrap failed", "log_tail": "ray start: token rejected\n"}


def node(node_id: str, intent: str, instance: str) -> Node:
    return Node(id=node_id, provider="aws", cloud="aws", zone="us-east-1a", instance_type="g5.xlarge",
                accelerator="A10G", accelerator_count=1, market=Market.SPOT, price_per_hour=0.4,
                on_demand_price_per_hour=1.0, state=NodeState.READY, intent_id=intent,
                instance_id=instance, requested_at=0.0)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[BareApi]:
    with bare_api(tmp_path) as built:
        built.replica.service.base_store.commit(nodes=[node("node-a", "launch-a", "i-0aaa"),
                                                       node("node-b", "launch-b", "i-0bbb")])
        yield built


def cred(intent: str) -> str:
    return node_credential(report_secret(hash_token(ADMIN_TOKEN)), intent)


def test_a_node_reports_its_notice_and_its_failed_boot(api: BareApi) -> None:
    client = api.client(cred("launch-a"))
    r = client.post("/v1/nodes/i-0aaa/notice", json=NOTICE)
    assert r.status_code == 202, r.text
    assert r.json() == {"instance_id": "i-0aaa", "kind": "notice"}
    assert client.post("/v1/nodes/i-0aaa/boot-failure", json=FAILED).status_code == 202
    taken = sorted(api.replica.service.base_store.take_node_reports())
    assert taken == [("boot_failed", "i-0aaa", FAILED), ("notice", "i-0aaa", NOTICE)]


def test_a_report_for_another_node_is_refused(api: BareApi) -> None:
    mine = api.client(cred("launch-a"))
    for path, body in (("/v1/nodes/i-0bbb/notice", NOTICE), ("/v1/nodes/i-0bbb/boot-failure", FAILED)):
        r = mine.post(path, json=body)
        assert r.status_code == 403, (path, r.text)
    for token in (api.tenant_token, api.admin_token, "spn_" + "0" * 64):
        assert api.client(token).post("/v1/nodes/i-0aaa/notice", json=NOTICE).status_code == 403
    assert api.client(None).post("/v1/nodes/i-0aaa/notice", json=NOTICE).status_code == 401
    assert api.replica.service.base_store.take_node_reports() == []


def test_a_malformed_report_is_refused_before_it_is_kept(api: BareApi) -> None:
    client = api.client(cred("launch-a"))
    assert client.post("/v1/nodes/i-0aaa/notice", json={"action": "x", "seconds_left": -1}).status_code == 422
    assert client.post("/v1/nodes/i-0aaa/boot-failure", json={"reason": "x", "more": 1}).status_code == 422
    assert api.replica.service.base_store.take_node_reports() == []


def test_an_instance_no_live_node_holds_is_404_naming_it(api: BareApi) -> None:
    r = api.client(cred("launch-a")).post("/v1/nodes/i-0zzz/notice", json=NOTICE)
    assert r.status_code == 404, r.text
    assert "i-0zzz" in r.text
    assert api.replica.service.base_store.take_node_reports() == []


def test_a_report_finds_its_node_among_many_by_the_instance_index(api: BareApi) -> None:
    store = api.replica.service.base_store
    store.commit(nodes=[node(f"node-{i}", f"launch-{i}", f"i-{i:04d}") for i in range(300)])
    gone = node("node-old", "launch-old", "i-0150")  # a gone node once held the same instance
    gone.state = NodeState.TERMINATED
    store.commit(nodes=[gone])
    r = api.client(cred("launch-150")).post("/v1/nodes/i-0150/notice", json=NOTICE)
    assert r.status_code == 202, r.text
    found = store.node_by_instance("i-0150")
    assert found is not None and found.id == "node-150"
    plan = store._q("EXPLAIN QUERY PLAN SELECT id FROM nodes WHERE instance_id = ?", ("i-0150",))
    assert any("nodes_instance" in str(row) for row in plan), plan


NODE_BURST = 3
TIGHT_NODES = UNTHROTTLED.model_copy(update={"node_report_burst": NODE_BURST,
                                             "node_report_rate_per_s": 0.001})


def test_an_instances_reports_past_its_burst_are_429_before_the_credential(tmp_path: Path) -> None:
    with bare_api(tmp_path, limits=TIGHT_NODES) as tight:
        tight.replica.service.base_store.commit(nodes=[node("node-a", "launch-a", "i-0aaa"),
                                                       node("node-b", "launch-b", "i-0bbb")])
        forged = tight.client("spn_" + "0" * 64)
        for _ in range(NODE_BURST):
            assert forged.post("/v1/nodes/i-0aaa/notice", json=NOTICE).status_code == 403
        r = tight.client(cred("launch-a")).post("/v1/nodes/i-0aaa/notice", json=NOTICE)
        assert r.status_code == 429, r.text
        assert int(r.headers["Retry-After"]) >= 1 and "i-0aaa" in r.text
        other = tight.client(cred("launch-b")).post("/v1/nodes/i-0bbb/boot-failure", json=FAILED)
        assert other.status_code == 202, other.text  # another instance is not slowed
        metrics = tight.client(tight.admin_token).get("/metrics").text
        assert 'spotplane_api_node_reports_limited_total{limit="instance"} 1.0' in metrics
        assert tight.replica.service.base_store.take_node_reports() == [
            ("boot_failed", "i-0bbb", FAILED)]


def test_a_client_address_past_its_burst_is_429_whatever_instance_it_names(tmp_path: Path) -> None:
    limits = UNTHROTTLED.model_copy(update={"node_client_burst": 5, "node_client_rate_per_s": 0.001})
    with bare_api(tmp_path, limits=limits) as tight:
        flood = tight.client("spn_" + "0" * 64)
        codes = [flood.post(f"/v1/nodes/i-{i:04d}/notice", json=NOTICE).status_code for i in range(7)]
        assert codes == [404] * 5 + [429] * 2
        metrics = tight.client(tight.admin_token).get("/metrics").text
        assert 'spotplane_api_node_reports_limited_total{limit="client"} 2.0' in metrics
