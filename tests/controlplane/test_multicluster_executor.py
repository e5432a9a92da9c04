"""The multi-cluster executor's routing without Ray: a job runs on its nodes' cluster, a gang
never spans two, a move numbers attempts on and bills the freshest checkpoint's egress, health
checks mark a cluster unhealthy and back, and placement is kept off clusters taking no work."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from actors.execution import ExecutorConfig, ReplicaState
from actors.execution.multicluster import MultiClusterExecutor, closed_zones
from clusters.artifacts import ArtifactRef
from clusters.clusterfleet import ClusterGatedFleet
from clusters.workloadhealth import ClusterHealth, alive_nodes
from controlplane.core.errors import CapacityUnavailable, InvalidInput
from controlplane.core.models import Job, JobSpec, Market, Node
from controlplane.core.workloadclusters import ClusterState, WorkloadClusterSpec
from controlplane.store import Store
from policies.egress import AWS_INTER_REGION_USD_PER_GB, GB


class FakeSubmissions:
    def __init__(self) -> None:
        self.attempts: dict[tuple[str, str], int] = {}


class FakeArtifacts:
    def __init__(self, refs: list[ArtifactRef]) -> None:
        self.refs = refs

    def list(self, job_id: str) -> list[ArtifactRef]:
        return [r for r in self.refs if r.job_id == job_id]


class FakeExecutor:
    """One cluster's executor: records what it was asked."""

    def __init__(self, config: ExecutorConfig, refs: list[ArtifactRef]) -> None:
        self.config = config
        self.started: list[tuple[str, list[str], int]] = []
        self.stopped: list[str] = []
        self.submissions = FakeSubmissions()
        self.artifacts = FakeArtifacts(refs)
        self.replicas: dict[str, list[Any]] = {}
        self.actors = SimpleNamespace(close=lambda: None)

    def start(self, job: Job, nodes: list[Node]) -> None:
        n = self.submissions.attempts.get((job.id, "r0"), 0) + 1
        self.submissions.attempts[(job.id, "r0")] = n
        self.started.append((job.id, [x.id for x in nodes], n))
        self.replicas.setdefault(job.id, []).append(
            SimpleNamespace(attempt=n, state=ReplicaState.RUNNING, started_at=float(n)))

    def live(self, job_id: str) -> list[Any]:
        return [] if job_id in self.stopped else [
            r for r in self.replicas.get(job_id, []) if r.state is not ReplicaState.STOPPED]

    def stop(self, job: Job, reason: str) -> None:
        self.stopped.append(job.id)

    def store_for(self, tenant_id: str | None) -> FakeArtifacts:
        return self.artifacts

    def poll(self, jobs: list[Job]) -> dict[str, Any]:
        return {j.id: self.config.workload_address for j in jobs}


def _node(node_id: str, zone: str) -> Node:
    return Node(id=node_id, provider="sim", cloud="aws", zone=zone, instance_type="p3.2xlarge",
                accelerator="V100", accelerator_count=1, market=Market.SPOT, price_per_hour=1.0,
                on_demand_price_per_hour=3.0, intent_id=f"i-{node_id}", requested_at=0.0)


def _job(workers: int = 1) -> Job:
    spec = JobSpec(name="j", compute_hours=1.0, entrypoint="python x.py", workers=workers)
    return Job(id="job-1", tenant_id="t", name="j", kind=spec.kind, spec=spec, submitted_at=0.0)


@pytest.fixture
def world(tmp_path: Path) -> Any:
    store = Store(tmp_path / "spotplane.db")
    for name, region, zones in (("east", "us-east-1", ["us-east-1a"]),
                                ("west", "us-west-2", ["us-west-2a"])):
        store.add_cluster(WorkloadClusterSpec(
            name=name, cloud="aws", region=region, gcs_address="127.0.0.1:6379",
            dashboard_url=f"http://{name}:8265", zones=zones))
    refs = [ArtifactRef("job-1", "r0", t=float(i), seq=i, sha256="0" * 64, size=1000 * (i + 1),
                        progress=i / 10, created_at=float(i)) for i in range(3)]
    made: dict[str, FakeExecutor] = {}

    def make(config: ExecutorConfig) -> Any:
        made[str(config.workload_address)] = FakeExecutor(config, refs)
        return made[str(config.workload_address)]

    health = {"east": ClusterHealth(True, 1), "west": ClusterHealth(True, 1)}
    ex = MultiClusterExecutor(ExecutorConfig(artifact_uri="/tmp/a"), store, make=make,
                              checker=lambda c: health[c.name], check_every_s=0.0)
    yield store, ex, made, health
    store.close()


def test_a_job_runs_on_its_nodes_cluster_and_a_move_bills_its_egress(world: Any) -> None:
    store, ex, made, _ = world
    job = _job()
    ex.start(job, [_node("n1", "us-east-1a")])
    assert job.cluster == "east" and set(made) == {"http://east:8265"}
    assert ex.poll([job]) == {"job-1": "http://east:8265"}
    assert job.egress_bytes == 0
    ex.stop(job, "region lost")
    ex.start(job, [_node("n2", "us-west-2a")])
    assert job.cluster == "west"
    assert made["http://west:8265"].started == [("job-1", ["n2"], 2)]  # attempts go on
    assert job.egress_bytes == 3000  # the freshest checkpoint, once
    assert job.egress_cost == pytest.approx(3000 / GB * AWS_INTER_REGION_USD_PER_GB)
    assert ex.poll([job]) == {"job-1": "http://west:8265"}


def test_a_gang_never_spans_two_clusters(world: Any) -> None:
    _, ex, _, _ = world
    with pytest.raises(InvalidInput, match="spans clusters"):
        ex.start(_job(workers=2), [_node("n1", "us-east-1a"), _node("n2", "us-west-2a")])


def test_health_marks_unhealthy_and_back_and_placement_keeps_off(world: Any) -> None:
    store, ex, _, health = world
    health["east"] = ClusterHealth(False, 0, "job API refused")
    ex.check_health(force=True)
    ex.check_health(force=True)
    assert store.get_cluster("east").state is ClusterState.ACTIVE  # two slow answers: still up
    ex.check_health(force=True)
    east = store.get_cluster("east")
    assert east.state is ClusterState.UNHEALTHY and east.health_message == "job API refused"
    closed = closed_zones(store, ttl_s=0.0)
    assert closed() == {"us-east-1a"}
    health["east"] = ClusterHealth(True, 2)
    ex.check_health(force=True)
    assert store.get_cluster("east").state is ClusterState.ACTIVE and closed() == set()
    store.drain_cluster("west")
    ex.check_health(force=True)  # a passing check leaves a draining cluster draining
    assert store.get_cluster("west").state is ClusterState.DRAINING
    assert closed() == {"us-west-2a"}


def test_the_gated_fleet_offers_and_launches_nothing_in_closed_zones() -> None:
    from clusters.fleet import LaunchRequest, Offer

    class Inner:
        name, lifetimes = "sim", None

        def offers(self) -> list[Offer]:
            return [Offer(cloud="aws", zone=z, instance_type="p3.2xlarge", accelerator="V100",
                          accelerator_count=1, spot_price=1.0, on_demand_price=3.0)
                    for z in ("a", "b")]

        def spot_available(self, zone: str, instance_type: str) -> bool:
            return True

        def spot_availability(self) -> dict[str, bool]:
            return {"a": True, "b": True}

        def launch(self, request: LaunchRequest) -> list[Any]:
            return ["launched"]

    gated = ClusterGatedFleet(Inner(), lambda: {"a"})  # type: ignore[arg-type]
    assert [o.zone for o in gated.offers()] == ["a", "b"]  # the catalog stays whole
    assert gated.spot_availability() == {"a": False, "b": True}
    assert not gated.spot_available("a", "p3.2xlarge")
    with pytest.raises(CapacityUnavailable):
        gated.launch(LaunchRequest("i1", "a", "p3.2xlarge", Market.SPOT))
    assert gated.launch(LaunchRequest("i2", "b", "p3.2xlarge", Market.SPOT)) == ["launched"]


def test_alive_nodes_counts_the_state_apis_alive_rows() -> None:
    answer = {"data": {"result": {"result": [{"state": "ALIVE"}, {"state": "DEAD"},
                                             {"state": "ALIVE"}]}}}
    assert alive_nodes(answer) == 2 and alive_nodes({}) == 0


def test_one_cluster_keeps_the_single_executor_and_two_make_the_multi(tmp_path: Path) -> None:
    from actors.execution.multicluster import make_cluster_executor
    from actors.simexecutor import SimulatedExecutor
    from controlplane.core.clock import SimClock

    store = Store(tmp_path / "spotplane.db")
    try:
        sim = make_cluster_executor(ExecutorConfig(kind="simulated"), clock=SimClock(), store=store)
        assert isinstance(sim, SimulatedExecutor)
        store.add_cluster(WorkloadClusterSpec(name="west", cloud="aws", region="us-west-2",
                                              dashboard_url="http://west:8265"))
        multi = make_cluster_executor(ExecutorConfig(workload_address="east:8265"),
                                      clock=SimClock(), store=store)
        assert isinstance(multi, MultiClusterExecutor) and set(multi.clusters) == {"west"}
        multi.close()
    finally:
        store.close()


def test_a_cluster_that_stops_answering_loses_its_replicas_not_the_job(world: Any) -> None:
    _, ex, made, _ = world

    class Gone(FakeExecutor):
        def stop(self, job: Job, reason: str) -> None:
            raise ConnectionError("actor bridge died: the other side closed the pipe")

    job = _job()
    ex.start(job, [_node("n1", "us-east-1a")])
    east = ex.executors["east"]
    east.__class__ = Gone
    ex.stop(job, "node lost")  # no error: the cluster is gone, and its replicas with it
    assert "east" not in ex.executors and ex.gone[0][0] == "east"
    ex.start(job, [_node("n2", "us-west-2a")])
    assert made["http://west:8265"].started == [("job-1", ["n2"], 2)]
    assert ex.attempts_by_cluster("job-1") == {"east": 1, "west": 1}
