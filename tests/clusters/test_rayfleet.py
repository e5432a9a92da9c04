"""RayAutoscalerFleet on Ray's fake multi-node autoscaling provider, in a private cluster.

Ray's own ``AutoscalingCluster`` runs ``ray stop --force`` (it would kill every Ray on this
shared machine, the session fixture included) and binds port 6379, so the slow test starts the
same thing privately in a subprocess: a head ``ray._private.node.Node`` with the fake provider's
autoscaling config, every port free-picked, its own temp dir; worker nodes are started by the
autoscaler's monitor through ``FakeMultiNodeProvider``. Cleanup kills only the processes whose
command line names that temp dir. A preemption is a worker raylet killed with SIGKILL.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))

from clusters.cloudcalls import launch_first_available  # noqa: E402
from clusters.fleet import EventKind, LaunchRequest, Market  # noqa: E402
from clusters.ray.catalog import node_types_from_config  # noqa: E402
from clusters.ray.fleet import RayAutoscalerFleet  # noqa: E402
from controlplane.core.clock import SimClock, WallClock  # noqa: E402
from controlplane.core.errors import CapacityUnavailable, ConfigError, InvalidInput  # noqa: E402
from tests.support import free_port  # noqa: E402

HEAD = "ray.head.default"


def fake_cluster_config(gcs_address: str) -> dict[str, Any]:
    """The fake_multinode provider's config, complete (the monitor does not fill in defaults)."""
    return {
        "cluster_name": "spotplane-fake", "max_workers": 3, "upscaling_speed": 1.0,
        "idle_timeout_minutes": 0.1,
        "provider": {"type": "fake_multinode", "use_node_id_as_ip": True, "disable_node_updaters": True,
                     "disable_launch_config_check": True, "gcs_address": gcs_address,
                     "availability_zone": "fake-zone-a"},
        "available_node_types": {
            HEAD: {"resources": {"CPU": 1}, "node_config": {}, "max_workers": 0},
            "gpu_spot_fake": {"resources": {"CPU": 1, "spot": 1, "accelerator_type:FAKE": 1},
                              "node_config": {}, "min_workers": 0, "max_workers": 2},
            "gpu_on_demand_fake": {"resources": {"CPU": 1, "on_demand": 1, "accelerator_type:FAKE": 1},
                                   "node_config": {}, "min_workers": 0, "max_workers": 1},
        },
        "head_node_type": HEAD, "auth": {}, "docker": {}, "initialization_commands": [],
        "setup_commands": [], "head_setup_commands": [], "worker_setup_commands": [],
        "head_start_ray_commands": [], "worker_start_ray_commands": [], "file_mounts": {},
        "cluster_synced_files": [], "file_mounts_sync_continuously": False, "rsync_exclude": [],
        "rsync_filter": [],
    }


# --------------------------------------------------------------------------- fast tests (no Ray)
class FakeState:
    """Stands in for the state API and request_resources in the logic-only tests."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.requests: list[list[dict[str, float]]] = []

    def add(self, node_id: str, resources: dict[str, float]) -> None:
        self.nodes.append({"node_id": node_id, "state": "ALIVE", "is_head_node": False,
                           "resources_total": resources, "state_message": None})


def logic_fleet(clock: SimClock, state: FakeState) -> RayAutoscalerFleet:
    types = node_types_from_config(fake_cluster_config("unused"))
    return RayAutoscalerFleet(types, clock=clock, list_nodes=lambda: state.nodes,
                              request=state.requests.append, launch_timeout_s=600)


def test_node_types_from_the_shipped_yaml() -> None:
    import yaml

    types = node_types_from_config(yaml.safe_load((ROOT / "ray-cluster.yaml").read_text()))
    assert "head" not in types
    a10g = types["gpu_spot_a10g"]
    assert (a10g.market, a10g.accelerator, a10g.zone) == (Market.SPOT, "A10G", "us-east-1a")
    assert a10g.on_demand_price == pytest.approx(1.006) and a10g.spot_price < a10g.on_demand_price
    assert types["gpu_on_demand_a10g"].market == Market.ON_DEMAND
    assert types["gpu_spot_v100"].on_demand_price == pytest.approx(3.06)


def test_launch_validates_and_asks_the_autoscaler_once() -> None:
    """Idempotency and refusals in general: test_conformance; here, slots and their bundles."""
    state, clock = FakeState(), SimClock()
    fleet = logic_fleet(clock, state)
    with pytest.raises(InvalidInput, match="instance_type"):
        fleet.launch(LaunchRequest("x", "fake-zone-a", "g5.xlarge", Market.SPOT))
    with pytest.raises(InvalidInput, match="market"):
        fleet.launch(LaunchRequest("x", "fake-zone-a", "gpu_on_demand_fake", Market.SPOT))
    first = fleet.launch(LaunchRequest("a", "fake-zone-a", "gpu_spot_fake", Market.SPOT, 2))
    fleet.launch(LaunchRequest("a", "fake-zone-a", "gpu_spot_fake", Market.SPOT, 2))
    assert [i.instance_id for i in first] == ["a/0", "a/1"]
    assert len(state.requests) == 1 and len(state.requests[0]) == 2
    assert state.requests[0][0] == {"CPU": 1.0, "spot": 1.0, "accelerator_type:FAKE": 1.0}
    assert not fleet.spot_available("fake-zone-a", "gpu_spot_fake")
    with pytest.raises(CapacityUnavailable, match="max_workers=2"):
        fleet.launch(LaunchRequest("b", "fake-zone-a", "gpu_spot_fake", Market.SPOT))


def test_unplaced_slot_times_out_as_launch_failed() -> None:
    state, clock = FakeState(), SimClock()
    fleet = logic_fleet(clock, state)
    fleet.launch(LaunchRequest("a", "fake-zone-a", "gpu_spot_fake", Market.SPOT))
    clock.advance(601)
    [event] = fleet.poll_events()
    assert event.kind == EventKind.LAUNCH_FAILED and event.instance_id == "a/0"
    assert state.requests[-1] == []  # its bundle was withdrawn


def test_selected_by_name_and_a_missing_config_is_clear(tmp_path: Path) -> None:
    from clusters.providers import make_provider

    with pytest.raises(ConfigError, match="ray fleet: no cluster config at"):
        make_provider("ray", config=str(tmp_path / "nope.yaml"))


def test_config_without_market_resource_is_rejected() -> None:
    config = fake_cluster_config("unused")
    config["available_node_types"]["gpu_spot_fake"]["resources"].pop("spot")
    with pytest.raises(ConfigError, match="gpu_spot_fake"):
        node_types_from_config(config)


@pytest.mark.parametrize(("text", "message"), [
    ("available_node_types: {head: {resources: {CPU: 1}}\n", "is not valid YAML (line 2, column 1: expected ',' or '}'"),
    ("- a\n- b\n", "must hold a mapping"),
    ("head_node_type: head\navailable_node_types: {head: {resources: {CPU: 1}}}\n",
     "the cluster config has no worker node types"),
    ("available_node_types: {w: {resources: {spot: 1, GPU: many}}}\n",
     "node type 'w': resources.GPU is 'many', not a number >= 0"),
    ("available_node_types: {w: {resources: {spot: 1}, max_workers: -2}}\n",
     "node type 'w': max_workers is -2, not a number >= 0"),
    ("available_node_types: {w: {resources: {spot: 1}, max_workers: 1.5}}\n",
     "node type 'w': max_workers 1.5 is not a whole number"),
    ("available_node_types: [w]\n", "available_node_types must map each node type name to a mapping"),
])
def test_a_bad_cluster_yaml_is_one_config_error(tmp_path: Path, text: str, message: str) -> None:
    from clusters.ray.catalog import load_cluster_config

    f = tmp_path / "cluster.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        node_types_from_config(load_cluster_config(f))
    assert message in str(err.value) and "\n" not in str(err.value) and ConfigError.exit_code == 2
    with pytest.raises(ConfigError, match="ray fleet: "):  # refused before any Ray is started
        RayAutoscalerFleet.from_options(config=str(f), address="127.0.0.1:9")


def test_first_available_walks_node_types_by_zone() -> None:
    state, clock = FakeState(), SimClock()
    fleet = logic_fleet(clock, state)
    fleet.launch(LaunchRequest("full", "fake-zone-a", "gpu_spot_fake", Market.SPOT, 2))
    with pytest.raises(CapacityUnavailable):
        launch_first_available(fleet, LaunchRequest("more", "", "gpu_spot_fake", Market.SPOT), ["fake-zone-a"])


# --------------------------------------------------------------------------- the real cluster
def run_scenario(tmp: str) -> dict[str, Any]:  # runs in the subprocess
    import ray
    from ray._private.node import Node
    from ray._private.parameter import RayParams

    os.environ["RAY_FAKE_CLUSTER"] = "1"
    os.environ["AUTOSCALER_UPDATE_INTERVAL_S"] = "1"
    ip = ray._private.services.get_node_ip_address()
    gcs = f"{ip}:{free_port()}"
    config = fake_cluster_config(gcs)
    config_path = Path(tmp) / "autoscaler.json"
    config_path.write_text(json.dumps(config))
    settings: dict[str, Any] = dict(  # every port free-picked: other Rays run on this machine
        node_ip_address=ip, gcs_server_port=int(gcs.rsplit(":", 1)[1]), num_cpus=1,
        include_dashboard=True, dashboard_host="127.0.0.1", dashboard_port=free_port(),
        dashboard_agent_listen_port=free_port(), metrics_agent_port=free_port(),
        runtime_env_agent_port=free_port(), metrics_export_port=free_port(),
        min_worker_port=0, max_worker_port=0, temp_dir=tmp, autoscaling_config=str(config_path),
        _system_config={"health_check_period_ms": 500, "health_check_failure_threshold": 3,
                        "health_check_initial_delay_ms": 0},
    )
    params = RayParams(**settings)
    head = Node(params, head=True, shutdown_at_exit=True, spawn_reaper=True)
    ray.init(address=head.address, log_to_driver=False, configure_logging=False)
    out: dict[str, Any] = {"events": [], "checks": {}}
    fleet = RayAutoscalerFleet(node_types_from_config(config), clock=WallClock(), launch_timeout_s=240)

    def poll_until(pred: Any, limit: float) -> None:
        end = time.monotonic() + limit
        while time.monotonic() < end:
            for e in fleet.poll_events():
                out["events"].append({"kind": e.kind.value, "id": e.instance_id, "detail": e.detail,
                                      "t": round(time.monotonic() - t0, 1)})
            if pred():
                return
            time.sleep(1.0)

    def kinds(slot: str) -> list[str]:
        return [e["kind"] for e in out["events"] if e["id"] == slot]

    t0 = time.monotonic()
    try:
        spot = fleet.launch(LaunchRequest("job-a", "fake-zone-a", "gpu_spot_fake", Market.SPOT, 2,
                                          {"job_id": "job-a", "tenant_id": "acme"}))
        fleet.launch(LaunchRequest("job-a", "fake-zone-a", "gpu_spot_fake", Market.SPOT, 2))  # retried
        out["checks"]["requested_after_retry"] = len(fleet.requested)
        out["checks"]["launched"] = [i.instance_id for i in spot]
        poll_until(lambda: all("ready" in kinds(f"job-a/{i}") for i in range(2)), 180)
        described = {i.instance_id: i for i in fleet.describe()}
        out["checks"]["ready_nodes"] = sorted(i.tags.get("ray_node_id", "") for i in described.values())
        out["checks"]["states_after_ready"] = sorted(i.state.value for i in described.values())
        resources = {x["NodeID"]: x["Resources"] for x in ray.nodes()}
        out["checks"]["bound_nodes_have_spot"] = all(
            resources[i.tags["ray_node_id"]].get("spot") == 1 for i in described.values())
        out["checks"]["spot_available_when_full"] = fleet.spot_available("fake-zone-a", "gpu_spot_fake")

        # preemption: the node under job-a/0 vanishes (its raylet is SIGKILLed)
        victim = described["job-a/0"].tags["ray_node_id"]
        out["checks"]["killed"] = kill_raylet(victim)
        poll_until(lambda: "preempted" in kinds("job-a/0"), 90)
        out["checks"]["requested_after_preemption"] = len(fleet.requested)
        out["checks"]["state_after_preemption"] = fleet.describe(["job-a/0"])[0].state.value

        # our own release of job-a/1
        fleet.terminate(["job-a/1"])
        poll_until(lambda: "terminated" in kinds("job-a/1"), 10)
        out["checks"]["requested_after_terminate"] = len(fleet.requested)

        # on-demand fallback
        fleet.launch(LaunchRequest("job-b", "fake-zone-a", "gpu_on_demand_fake", Market.ON_DEMAND))
        poll_until(lambda: "ready" in kinds("job-b/0"), 180)
        out["checks"]["od_market"] = fleet.describe(["job-b/0"])[0].market.value
    finally:
        out["checks"]["elapsed_s"] = round(time.monotonic() - t0, 1)
        ray.shutdown()
        head.kill_all_processes(check_alive=False, allow_graceful=False)
    return out


def processes() -> list[tuple[int, str]]:
    """(pid, command line) of every process we may see, from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        out.append((int(entry.name), cmd))
    return out


def kill_raylet(node_id: str) -> bool:
    """SIGKILL the raylet of ``node_id`` (a process this scenario's cluster started)."""
    for pid, cmd in processes():
        if "raylet/raylet" in cmd and node_id in cmd:
            os.kill(pid, signal.SIGKILL)
            return True
    return False


def our_processes(tmp: str) -> list[int]:
    return [pid for pid, cmd in processes() if pid != os.getpid() and tmp in cmd]


def kill_ours(tmp: str) -> int:
    killed = 0
    for pid in our_processes(tmp):
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    return killed


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_on_the_fake_autoscaling_cluster() -> None:
    tmp = tempfile.mkdtemp(prefix="spf-", dir="/tmp")  # short: raylet socket paths
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1"}
    env.pop("RAY_ADDRESS", None)
    try:
        proc = subprocess.run([sys.executable, __file__, tmp], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=540)
    finally:
        leftovers = kill_ours(tmp)  # worker raylets the fake provider started outlive the head
        time.sleep(0.5)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((Path(tmp) / "result.json").read_text())
    checks, events = result["checks"], result["events"]
    print(json.dumps(result, indent=1))
    assert checks["launched"] == ["job-a/0", "job-a/1"] and checks["requested_after_retry"] == 2
    assert checks["states_after_ready"] == ["running", "running"]
    nodes = checks["ready_nodes"]
    assert len(set(nodes)) == 2 and all(nodes), nodes  # two distinct Ray nodes, one per slot
    assert checks["bound_nodes_have_spot"] and checks["spot_available_when_full"] is False
    assert checks["killed"]
    by_slot = {s: [e["kind"] for e in events if e["id"] == s] for s in ("job-a/0", "job-a/1", "job-b/0")}
    assert by_slot["job-a/0"] == ["ready", "preempted"]
    assert by_slot["job-a/1"] == ["ready", "terminated"]
    assert by_slot["job-b/0"] == ["ready"] and checks["od_market"] == "on_demand"
    assert checks["state_after_preemption"] == "preempted"
    assert checks["requested_after_preemption"] == 1 and checks["requested_after_terminate"] == 0
    preempted = next(e for e in events if e["kind"] == "preempted")
    assert preempted["detail"] and not math.isnan(preempted["t"])
    assert our_processes(tmp) == [], f"left running after cleanup (killed {leftovers})"
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    outcome = run_scenario(sys.argv[1])
    (Path(sys.argv[1]) / "result.json").write_text(json.dumps(outcome))
