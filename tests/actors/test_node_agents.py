"""Node agents: the reconcile decision (pure), and a supervisor on a real Ray that pins an agent to
the node, the agent learning its instance id from a local fake metadata server and telling a
listener of the preemption notice."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from actors.controller import ControllerActor
from actors.node_agents import (
    NodeRule,
    agent_name,
    node_agent_cloud,
    node_agent_identity,
    plan_agents,
)
from actors.runtime import RuntimeSettings, _start_node_agents
from clusters.fleet import Instance, InstanceState
from controlplane.core.errors import InvalidInput
from controlplane.core.models import Market
from tests.support import free_port


def _load(name: str) -> Any:
    path = Path(__file__).resolve().parents[1] / "clusters" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"spotplane_tests_agents_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _node(node_id: str, state: str = "ALIVE", head: bool = False, **resources: float) -> dict[str, Any]:
    return {"node_id": node_id, "state": state, "is_head_node": head,
            "resources_total": {"CPU": 4.0, **resources}}


def test_default_rule_picks_spot_and_on_demand_workers_not_the_head() -> None:
    rule = NodeRule()
    assert rule(_node("w1", spot=1)) and rule(_node("w2", on_demand=1, **{"accelerator_type:A10G": 1}))
    assert not rule(_node("head", on_demand=1, spotplane_head=1))  # ray-cluster.yaml's head
    assert not rule(_node("h2", head=True, spot=1))  # the GCS head, whatever it carries
    assert not rule(_node("cpu-only"))
    assert NodeRule(require_any=("CPU",), exclude=(), include_head=True)(_node("local", head=True))


def test_plan_starts_missing_and_forgets_gone() -> None:
    nodes = [_node("new", spot=1), _node("kept", spot=1), _node("dead", "DEAD", spot=1),
             _node("cpu"), _node("head", head=True, on_demand=1, spotplane_head=1),
             _node("flaky", spot=1), _node("od", on_demand=1)]
    plan = plan_agents(nodes, ["kept", "dead", "vanished", "od"], NodeRule(), blocked=["flaky"])
    assert plan.start == {"new"}
    assert plan.forget == {"dead", "vanished"}
    # a second pass after acting on it: nothing to do
    again = plan_agents(nodes, ["kept", "od", "new"], NodeRule(), blocked=["flaky"])
    assert again.start == again.forget == frozenset()
    assert plan_agents(nodes, ["kept", "od", "new"], NodeRule()).start == {"flaky"}  # retry due
    # a node that stops matching the rule loses its agent
    assert plan_agents(nodes, ["kept"], lambda n: n["node_id"] == "new").forget == {"kept"}


def test_cloud_and_identity_of_each_fleet() -> None:
    assert node_agent_cloud("sim") is None
    assert node_agent_cloud("aws") == "aws" and node_agent_cloud("gcp", env={}) == "gcp"
    assert node_agent_cloud("ray", env={}) == "aws"
    assert node_agent_cloud("ray", env={"SPOTPLANE_NODE_CLOUD": "gcp"}) == "gcp"
    assert node_agent_cloud("ray", "gcp", env={"SPOTPLANE_NODE_CLOUD": "aws"}) == "gcp"
    with pytest.raises(InvalidInput, match="SPOTPLANE_NODE_CLOUD"):
        node_agent_cloud("ray", env={"SPOTPLANE_NODE_CLOUD": "azure"})
    assert node_agent_identity("ray") == "ray_node" and node_agent_identity("aws") == "metadata"
    assert agent_name("abc123") == "spotplane-node-abc123"


def test_simulated_fleet_gets_no_supervisor(tmp_path: Path) -> None:
    assert _start_node_agents(RuntimeSettings(state_dir=tmp_path), controller=None) is None
    assert _start_node_agents(RuntimeSettings(state_dir=tmp_path, fleet="aws", node_agents=False),
                              controller=None) is None


def test_controller_maps_a_ray_node_id_to_its_slot() -> None:
    """Ray fleet agents report their Ray node id; the controller notices the slot it fills."""
    seen: list[tuple[str, float]] = []
    slot = Instance("intent-1/0", "ray", "ray", "gpu_spot_a10g", Market.SPOT, InstanceState.RUNNING, 0.0,
                    0.35, "A10G", 1, "intent-1", {"ray_node_id": "ab" * 28})
    actor = object.__new__(ControllerActor)
    actor._lock = threading.Lock()
    actor.fleet = SimpleNamespace(describe=lambda: [slot])
    actor.controller = SimpleNamespace(by_instance={"i-0aws": "n1"},
                                       external_notice=lambda iid, left: seen.append((iid, left)))
    actor.notice("ab" * 28, 110.0)
    actor.notice("i-0aws", 120.0)
    actor.notice("unknown", 5.0)
    assert seen == [("intent-1/0", 110.0), ("i-0aws", 120.0), ("unknown", 5.0)]


class Listener:
    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def notice(self, instance_id: str, seconds_left: float) -> None:
        self.calls.append((instance_id, seconds_left))

    def got(self) -> list[tuple[str, float]]:
        return list(self.calls)


def _wait_for(pred: Any, limit: float) -> Any:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    return pred()


@pytest.mark.ray
@pytest.mark.slow
def test_supervisor_pins_an_agent_that_reports_the_notice(ray_cluster: Any, tmp_path: Path) -> None:
    import ray

    from actors.node_agents import ray_nodes, stop_node_agents

    servers = _load("test_notices")
    ns = f"agents-{uuid.uuid4().hex[:8]}"
    node_id = ray.get_runtime_context().get_node_id()
    here = [n for n in ray_nodes() if n["node_id"] == node_id]
    assert here and here[0]["state"] == "ALIVE" and here[0]["is_head_node"]
    assert here[0]["resources_total"]["CPU"] == 4.0
    assert not NodeRule()(here[0])  # the default rule skips a head (the fixture's one node)
    listener = ray.remote(num_cpus=0)(Listener).remote()
    with servers.serve_metadata() as (state, url):
        settings = RuntimeSettings(state_dir=tmp_path, fleet="aws", namespace=ns, detached=False,
                                   metadata_url=url, node_agents_every_seconds=0.5,
                                   node_rule=NodeRule(require_any=("CPU",), exclude=(), include_head=True))
        sup = _start_node_agents(settings, listener)
        assert sup is not None
        try:
            agents = _wait_for(lambda: ray.get(sup.status.remote())["agents"], limit=30)
            assert agents == {node_id: state.instance_id}, ray.get(sup.status.remote())
            agent = ray.get_actor(agent_name(node_id), namespace=ns)
            assert ray.get(agent.ray_node_id.remote()) == node_id  # pinned to the node it watches
            assert ray.get(agent.health.remote())["instance_id"] == "i-0f3a9c2e7b1d4a6c8"
            assert ray.get(sup.reconcile.remote())["started"] == []  # exactly one per node
            assert [p for m, p, _ in state.requests if m == "GET"][0] == "/latest/meta-data/instance-id"

            state.notice_at = datetime.now(UTC) + timedelta(minutes=2)
            # AWS's agent polls every 5 s: the wait's bound fails a poll of a minute, and how
            # fast it lands under load is not this test's to time
            calls = _wait_for(lambda: ray.get(listener.got.remote()), limit=15)
            assert len(calls) == 1 and calls[0][0] == "i-0f3a9c2e7b1d4a6c8", calls
            assert 100 < calls[0][1] <= 120
        finally:
            stop_node_agents(sup)
        gone = _wait_for(lambda: agent_name(node_id) not in {
            a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == ns}, limit=15)
        assert gone, "the agent outlived its supervisor"
    ray.kill(listener)


@pytest.mark.ray
@pytest.mark.slow
def test_dead_node_is_forgotten_and_a_failed_start_waits(ray_cluster: Any) -> None:
    """In-process supervisor over a node list the test controls: the node dies -> its agent is
    killed; no metadata server -> the start fails, is not retried before ``retry_s``, then is."""
    import ray

    from actors.node_agents import NodeAgentSupervisor
    from controlplane.core.clock import SimClock

    servers = _load("test_notices")
    ns = f"agents-{uuid.uuid4().hex[:8]}"
    node_id = ray.get_runtime_context().get_node_id()
    nodes = [{"node_id": node_id, "state": "ALIVE", "is_head_node": True, "resources_total": {"CPU": 4.0}}]
    rule = NodeRule(require_any=("CPU",), exclude=(), include_head=True)
    names = lambda: {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)  # noqa: E731
                     if a["namespace"] == ns}
    with servers.serve_metadata() as (_, url):
        sup = NodeAgentSupervisor([], "gcp", ns, base_url=url, rule=rule, autostart=False,
                                  list_nodes=lambda: nodes)
        try:
            assert sup.reconcile()["started"] == [node_id]
            assert _wait_for(lambda: sup.reconcile()["agents"], limit=30) == {node_id: "sp-a10g-3f9c-0"}
            assert agent_name(node_id) in names()
            nodes[0]["state"] = "DEAD"
            out = sup.reconcile()
            assert out["forgotten"] == [node_id] and out["agents"] == {}
            assert _wait_for(lambda: agent_name(node_id) not in names(), limit=15)
        finally:
            sup.stop()
    nodes[0]["state"] = "ALIVE"
    clock = SimClock(start=0.0)
    down = NodeAgentSupervisor([], "gcp", ns, base_url=f"http://127.0.0.1:{free_port()}", rule=rule,
                               autostart=False, list_nodes=lambda: nodes, clock=clock, retry_s=30.0)
    try:
        assert down.reconcile()["started"] == [node_id]
        failed = _wait_for(lambda: down.reconcile()["failed"], limit=30)
        assert list(failed) == [node_id] and "refused" in failed[node_id].lower(), failed
        assert down.reconcile()["started"] == [] and down.status()["agents"] == {}
        assert _wait_for(lambda: agent_name(node_id) not in names(), limit=15)  # the failed agent is killed
        clock.advance(31.0)
        assert down.reconcile()["started"] == [node_id]  # retried once retry_s has passed
    finally:
        down.stop()
    assert _wait_for(lambda: agent_name(node_id) not in names(), limit=15)
