"""Placement across workload clusters without Ray: the reconcile loop on the simulated fleet,
gated by the clusters registered in the store. A closed cluster's zones are no candidate for
any launch (spot, on-demand, deadline, a hot spare's reuse); what runs there is left alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.execution.multicluster import closed_zones
from clusters.clusterfleet import ClusterGatedFleet
from clusters.sim import SimulatedFleet
from controlplane.core.clock import SimClock
from controlplane.core.models import JobSpec, JobState, Market
from controlplane.core.workloadclusters import WorkloadClusterSpec
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.store import Store
from policies.preemption import default_gce_model

CENTRAL = ("us-central1-a", "us-central1-b", "us-central1-c")  # the cheapest on-demand H100s
WEST = ("us-west1-a", "us-west1-b")


def _world(tmp: Path, data_root: Path, clock: SimClock,
           settings: ControllerSettings | None = None) -> tuple[Store, Controller]:
    store = Store(tmp / "spotplane.db")
    for name, region, zones in (("gcp-central", "us-central1", CENTRAL),
                                ("gcp-west", "us-west1", WEST)):
        store.add_cluster(WorkloadClusterSpec(name=name, cloud="gcp", region=region,
                                              dashboard_url=f"http://{name}:8265",
                                              zones=list(zones)))
    inner = SimulatedFleet.from_options(clock=clock, data_dir=data_root, seed=5,
                                        state_path=tmp / "simfleet.db",
                                        lifetime_model=default_gce_model())
    fleet = ClusterGatedFleet(inner, closed_zones(store, ttl_s=0.0))
    ctl = Controller(store, fleet, clock, settings or ControllerSettings(pool_nodes={"H100": 4}),
                     epoch=store.take_controller_lease())
    return store, ctl


def _run(ctl: Controller, clock: SimClock, hours: float, dt: float = 60.0) -> None:
    for _ in range(int(hours * 3600 / dt)):
        clock.advance(dt)
        ctl.tick()


def _launch_zones(store: Store, job_id: str) -> list[str]:
    return [d.zone for d in store.job_decisions(job_id) if d.action == "place" and d.zone]


def test_an_on_demand_job_never_launches_in_a_drained_clusters_zone(tmp_path: Path,
                                                                     data_root: Path) -> None:
    clock = SimClock(start=0.0)
    store, ctl = _world(tmp_path, data_root, clock)
    store.drain_cluster("gcp-central")
    t, _ = store.create_tenant("t", max_gpus=100)
    job = store.submit_job(t.id, JobSpec(name="h", kind="hp", compute_hours=0.5,
                                         accelerator="H100", gpus_per_worker=8), now=0.0)
    _run(ctl, clock, 0.3)
    j = store.get_job(job.id)
    assert j.state is JobState.RUNNING and j.market is Market.ON_DEMAND
    assert j.zone == "us-west1-a"  # the cheapest on-demand zone outside the drained cluster
    assert _launch_zones(store, job.id) == ["us-west1-a"]
    refused = [e.cause for e in store.job_events(job.id) if "takes no new work" in e.cause]
    assert refused == []  # never tried there: the candidates had no closed zone
    _run(ctl, clock, 1.0)
    assert store.get_job(job.id).state is JobState.SUCCEEDED


def test_an_unhealthy_clusters_zones_are_no_candidates_either(tmp_path: Path,
                                                              data_root: Path) -> None:
    clock = SimClock(start=0.0)
    store, ctl = _world(tmp_path, data_root, clock)
    for _ in range(3):
        store.record_cluster_health("gcp-central", healthy=False, nodes_alive=0,
                                    message="head gone", at=0.0)
    t, _ = store.create_tenant("t", max_gpus=100)
    hp = store.submit_job(t.id, JobSpec(name="h", kind="hp", compute_hours=0.5,
                                        accelerator="H100", gpus_per_worker=8), now=0.0)
    spot = store.submit_job(t.id, JobSpec(name="s", kind="spot", compute_hours=0.5,
                                          accelerator="H100", gpus_per_worker=8), now=0.0)
    _run(ctl, clock, 0.3)
    for job_id in (hp.id, spot.id):
        zones = _launch_zones(store, job_id)
        assert zones and not set(zones) & set(CENTRAL)


def test_a_drained_clusters_running_job_is_left_alone(tmp_path: Path, data_root: Path) -> None:
    clock = SimClock(start=0.0)
    store, ctl = _world(tmp_path, data_root, clock)
    t, _ = store.create_tenant("t", max_gpus=100)
    job = store.submit_job(t.id, JobSpec(name="h", kind="hp", compute_hours=1.0,
                                         accelerator="H100", gpus_per_worker=8), now=0.0)
    _run(ctl, clock, 0.2)
    assert store.get_job(job.id).state is JobState.RUNNING
    assert store.get_job(job.id).zone == "us-central1-a"
    store.drain_cluster("gcp-central")
    _run(ctl, clock, 1.5)
    j = store.get_job(job.id)
    assert j.state is JobState.SUCCEEDED and j.preemptions == 0 and j.attempts == 1
    assert _launch_zones(store, job.id) == ["us-central1-a"]


def test_hot_spares_in_a_closed_cluster_are_not_kept(tmp_path: Path, data_root: Path) -> None:
    clock = SimClock(start=0.0)
    settings = ControllerSettings(pool_nodes={"H100": 4}, hot_spare_seconds=3600.0,
                                  idle_node_seconds=60.0, reuse="always")
    store, ctl = _world(tmp_path, data_root, clock, settings)
    t, _ = store.create_tenant("t", max_gpus=100)
    first = store.submit_job(t.id, JobSpec(name="a", kind="hp", compute_hours=0.2,
                                           accelerator="H100", gpus_per_worker=8), now=0.0)
    _run(ctl, clock, 0.5)
    assert store.get_job(first.id).state is JobState.SUCCEEDED
    assert ctl.state.spares, "an idle node is kept as a hot spare while its cluster takes work"
    store.drain_cluster("gcp-central")
    _run(ctl, clock, 0.1)
    assert not ctl.state.spares
    second = store.submit_job(t.id, JobSpec(name="b", kind="hp", compute_hours=0.2,
                                            accelerator="H100", gpus_per_worker=8),
                              now=clock.now())
    _run(ctl, clock, 0.3)
    assert _launch_zones(store, second.id) == ["us-west1-a"]


@pytest.mark.parametrize("closed", [set(CENTRAL), set()])
def test_a_deadline_policy_sees_only_the_zones_that_take_work(tmp_path: Path, data_root: Path,
                                                              closed: set[str]) -> None:
    clock = SimClock(start=0.0)
    store, ctl = _world(tmp_path, data_root, clock)
    if closed:
        store.drain_cluster("gcp-central")
    t, _ = store.create_tenant("t", max_gpus=100)
    job = store.submit_job(t.id, JobSpec(name="d", kind="deadline", compute_hours=1.0,
                                         deadline_hours=3.0, accelerator="H100",
                                         gpus_per_worker=8), now=0.0)
    _run(ctl, clock, 0.2)
    ctl.tick()
    req = ctl.policies._request(ctl.state.jobs[job.id], clock.now())
    assert req is not None
    seen = {z.zone for z in req.obs.zones}
    assert not seen & closed and seen >= set(WEST)
    assert not set(_launch_zones(store, job.id)) & closed


def test_a_deadline_job_running_in_a_cluster_that_drains_is_not_failed(tmp_path: Path,
                                                                       data_root: Path) -> None:
    clock = SimClock(start=0.0)
    store = Store(tmp_path / "spotplane.db")
    store.add_cluster(WorkloadClusterSpec(name="gcp-east4", cloud="gcp", region="us-east4",
                                          dashboard_url="http://gcp-east4:8265",
                                          zones=["us-east4-a", "us-east4-b"]))
    inner = SimulatedFleet.from_options(clock=clock, data_dir=data_root, seed=5,
                                        state_path=tmp_path / "simfleet.db",
                                        lifetime_model=default_gce_model())
    ctl = Controller(store, ClusterGatedFleet(inner, closed_zones(store, ttl_s=0.0)), clock,
                     ControllerSettings(pool_nodes={"H100": 4}),
                     epoch=store.take_controller_lease())
    t, _ = store.create_tenant("t", max_gpus=100)
    job = store.submit_job(t.id, JobSpec(name="d", kind="deadline", compute_hours=1.0,
                                         deadline_hours=4.0, accelerator="H100",
                                         gpus_per_worker=8), now=0.0)
    _run(ctl, clock, 0.3)
    running = store.get_job(job.id)
    assert running.state is JobState.RUNNING and running.zone in ("us-east4-a", "us-east4-b")
    store.drain_cluster("gcp-east4")
    _run(ctl, clock, 4.0)
    done = store.get_job(job.id)
    causes = [e.cause for e in store.job_events(job.id)]
    assert done.state is JobState.SUCCEEDED, causes
    assert done.zone == running.zone and done.attempts == 1 and done.preemptions == 0
    assert not [c for c in causes if "quarantine" in c or "raised" in c], causes
