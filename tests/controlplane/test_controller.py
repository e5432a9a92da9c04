"""The reconcile loop without Ray: on the simulated fleet with a manual clock."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from benchmarks.live_zones import WatchedFleet
from clusters.sim import SimulatedFleet
from controlplane.core.clock import SimClock
from controlplane.core.models import Job, JobSpec, JobState, Node
from controlplane.reconcile.contracts import ControllerSettings, ExecutorReport, ReplicatingExecutor
from controlplane.reconcile.controller import Controller
from controlplane.store import Store
from policies.preemption import default_gce_model
from policies.reuse import ReuseByAge
from policies.schedulers import make_scheduler


class Crash(Exception):
    pass


def _world(tmp: Path, data_root: Path, clock: SimClock, pools: dict[str, int],
           seed: int = 5, db: str | None = None) -> tuple[Store, SimulatedFleet, Controller]:
    store = Store(db or tmp / "spotplane.db")
    fleet = SimulatedFleet.from_options(clock=clock, data_dir=data_root, seed=seed,
                                        state_path=tmp / "simfleet.db",
                                        lifetime_model=default_gce_model())
    ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes=pools),
                     epoch=store.take_controller_lease())
    return store, fleet, ctl


def _run(ctl: Controller, clock: SimClock, hours: float, dt: float = 60.0) -> None:
    for _ in range(int(hours * 3600 / dt)):
        clock.advance(dt)
        ctl.tick()


def test_hp_job_preempts_a_spot_job(tmp_path: Path, data_root: Path, store_url: str) -> None:
    clock = SimClock(start=0.0)
    store, fleet, ctl = _world(tmp_path, data_root, clock, {"V100": 2, "H100": 2}, db=store_url)
    t, _ = store.create_tenant("t", max_gpus=100)
    spot = store.submit_job(t.id, JobSpec(name="s", kind="spot", compute_hours=3, workers=2,
                                          accelerator="V100"), now=0.0)
    _run(ctl, clock, 0.5)
    assert store.get_job(spot.id).state is JobState.RUNNING
    hp = store.submit_job(t.id, JobSpec(name="h", kind="hp", compute_hours=0.5,
                                        accelerator="V100"), now=clock.now())
    _run(ctl, clock, 0.1)
    s = store.get_job(spot.id)
    assert s.preemptions >= 1 and s.state is JobState.QUEUED
    causes = [e.cause for e in store.job_events(spot.id)]
    assert any(c.startswith(f"preempted by hp job {hp.id}") for c in causes)
    assert store.get_job(hp.id).state in (JobState.STARTING, JobState.RUNNING)
    (d,) = [d for d in store.job_decisions(spot.id) if d.action == "preempt"]
    assert d.policy == "gfs"
    _run(ctl, clock, 12)
    assert store.get_job(hp.id).state is JobState.SUCCEEDED
    assert store.get_job(spot.id).state is JobState.SUCCEEDED
    assert store.get_job(spot.id).progress_hours == pytest.approx(3.0)


def test_cancel_releases_nodes(tmp_path: Path, data_root: Path, store_url: str) -> None:
    clock = SimClock(start=0.0)
    store, fleet, ctl = _world(tmp_path, data_root, clock, {"V100": 4, "H100": 2}, db=store_url)
    t, _ = store.create_tenant("t")
    job = store.submit_job(t.id, JobSpec(name="od", kind="hp", compute_hours=5, workers=2,
                                         accelerator="V100"), now=0.0)
    _run(ctl, clock, 0.3)
    assert store.get_job(job.id).state is JobState.RUNNING
    store.request_cancel(job.id, t.id)
    _run(ctl, clock, 0.05)
    j = store.get_job(job.id)
    assert j.state is JobState.CANCELLED and j.node_ids == [] and j.cost > 0
    live = [i for i in fleet.describe() if i.state.value in ("pending", "running")]
    assert live == []


def test_crash_between_intent_and_launch_launches_once(tmp_path: Path, data_root: Path,
                                                      store_url: str) -> None:
    """On both backends: the intents survive the crash, the old controller is fenced off."""
    clock = SimClock(start=0.0)
    store, fleet, ctl = _world(tmp_path, data_root, clock, {"V100": 8, "H100": 2}, db=store_url)
    t, _ = store.create_tenant("t")
    jobs = store.submit_jobs(t.id, [JobSpec(name=f"j{i}", kind="hp", compute_hours=1, workers=2,
                                            accelerator="V100") for i in range(3)], now=0.0)

    def crash(launches: int) -> None:
        if launches:
            raise Crash("power cut after the intents were written")

    ctl.after_barrier = crash
    clock.advance(60)
    with pytest.raises(Crash):
        ctl.tick()
    pending = store.pending_intents()
    assert len(pending) == 3 and fleet.instances_per_intent() == {}
    # a new process: new store connection, the cloud's state file, a new controller
    fleet2 = SimulatedFleet.from_options(clock=clock, data_dir=data_root, seed=5,
                                         state_path=tmp_path / "simfleet.db",
                                         lifetime_model=default_gce_model())
    store2 = Store(store_url)
    ctl2 = Controller(store2, fleet2, clock, ControllerSettings(pool_nodes={"V100": 8}),
                      epoch=store2.take_controller_lease())
    with pytest.raises(Exception, match="fenced"):
        ctl.after_barrier = None
        clock.advance(60)
        ctl.tick()  # the old controller is fenced off
    _run(ctl2, clock, 3)
    assert {store2.get_job(j.id).state for j in jobs} == {JobState.SUCCEEDED}
    assert sorted(fleet2.instances_per_intent().values()) == [2, 2, 2]
    assert store2.pending_intents() == []
    assert len({n.instance_id for n in store2.list_nodes()}) == 6


def test_rerunning_recover_changes_nothing(tmp_path: Path, data_root: Path, store_url: str) -> None:
    clock = SimClock(start=0.0)
    store, fleet, ctl = _world(tmp_path, data_root, clock, {"V100": 4, "H100": 2}, db=store_url)
    t, _ = store.create_tenant("t")
    store.submit_job(t.id, JobSpec(name="a", kind="spot", compute_hours=2, accelerator="V100"),
                     now=0.0)
    _run(ctl, clock, 0.5)
    before = [j.model_dump() for j in store.list_jobs()], len(store.events())
    ctl.recover()
    ctl.recover()
    assert ([j.model_dump() for j in store.list_jobs()], len(store.events())) == before


def test_node_agent_notice_triggers_a_checkpoint(tmp_path: Path, data_root: Path, store_url: str) -> None:
    clock = SimClock(start=0.0)
    store, fleet, ctl = _world(tmp_path, data_root, clock, {"V100": 2, "H100": 2}, db=store_url)
    t, _ = store.create_tenant("t")
    job = store.submit_job(t.id, JobSpec(name="s", kind="hp", compute_hours=4,
                                         accelerator="V100"), now=0.0)
    _run(ctl, clock, 0.5)
    (node,) = [n for n in ctl.nodes.values() if n.job_id == job.id]
    assert node.instance_id is not None
    before = store.get_job(job.id).checkpoints
    ctl.external_notice(node.instance_id, 90.0)
    _run(ctl, clock, 0.05)
    causes = [e.cause for e in store.job_events(job.id)]
    assert any(c.startswith("preemption notice: 90 s left") for c in causes)
    assert ctl.jobs[job.id].checkpoints == before + 1


def test_a_job_no_zone_can_host_fails_with_the_reason(tmp_path: Path, data_root: Path, store_url: str) -> None:
    clock = SimClock(start=0.0)
    store, fleet, ctl = _world(tmp_path, data_root, clock, {"V100": 2, "H100": 2}, db=store_url)
    t, _ = store.create_tenant("t")
    job = store.submit_job(t.id, JobSpec(name="big", compute_hours=1, accelerator="V100",
                                         gpus_per_worker=4), now=0.0)
    _run(ctl, clock, 0.05)
    j = store.get_job(job.id)
    assert j.state is JobState.FAILED
    assert "V100 with 4 GPUs per worker" in j.message and "H100x8" in j.message


class FakeReplicaExecutor(ReplicatingExecutor):
    """Reports time-based progress for entrypoint jobs and records the replication hooks."""

    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self.started: dict[str, float] = {}
        self.replicas: dict[str, set[str]] = {}
        self.calls: list[tuple[str, str]] = []

    def start(self, job: Job, nodes: Sequence[Node]) -> None:
        self.calls.append(("start", job.id))
        self.started[job.id] = self.clock.now()
        self.replicas[job.id] = {n.id for n in nodes}

    def stop(self, job: Job, reason: str) -> None:
        self.replicas.pop(job.id, None)

    def notice(self, job: Job, seconds_left: float) -> None:
        pass

    def poll(self, jobs: Sequence[Job]) -> dict[str, ExecutorReport]:
        out = {}
        for j in jobs:
            if j.id in self.started:
                done = (self.clock.now() - self.started[j.id]) / 3600
                out[j.id] = ExecutorReport(min(done, j.spec.compute_hours), done * 0.9,
                                           finished=done >= j.spec.compute_hours)
        return out

    def node_preempted(self, job: Job, node_id: str, reason: str = "") -> bool:
        self.calls.append(("preempted", node_id))
        self.replicas.get(job.id, set()).discard(node_id)
        return bool(self.replicas.get(job.id))

    def start_replacement(self, job: Job, node: Node) -> None:
        self.calls.append(("replacement", node.id))
        self.replicas.setdefault(job.id, set()).add(node.id)


def _executor_world(tmp: Path, data_root: Path, pools: dict[str, int]
                    ) -> tuple[SimClock, Store, SimulatedFleet, FakeReplicaExecutor, Controller]:
    """A controller on the simulated fleet (no GCP zones) running jobs through the fake executor."""
    clock = SimClock(start=0.0)
    store = Store(tmp / "spotplane.db")
    fleet = SimulatedFleet.from_options(clock=clock, data_dir=data_root, seed=1, gcp=False,
                                        state_path=tmp / "simfleet.db")
    ex = FakeReplicaExecutor(clock)
    ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes=pools),
                     executor=ex, epoch=store.take_controller_lease())
    return clock, store, fleet, ex, ctl


def test_a_replica_survives_a_preemption_and_gets_a_replacement(tmp_path: Path,
                                                                data_root: Path) -> None:
    clock, store, fleet, ex, ctl = _executor_world(tmp_path, data_root, {"V100": 4})
    t, _ = store.create_tenant("t")
    job = store.submit_job(t.id, JobSpec(name="r", kind="spot", compute_hours=30, replicas=2,
                                         accelerator="V100", entrypoint="python train.py"),
                           now=0.0)
    _run(ctl, clock, 0.3)
    j = ctl.jobs[job.id]
    assert j.state is JobState.RUNNING and len(j.node_ids) == 2  # one node per replica
    victim = ctl.nodes[j.node_ids[0]]
    fleet.terminate([victim.instance_id or ""])  # the cloud takes one node away
    _run(ctl, clock, 0.2)
    j = ctl.jobs[job.id]
    assert ("preempted", victim.id) in ex.calls
    assert j.state is JobState.RUNNING and j.preemptions == 0 and victim.id not in j.node_ids
    (new_id,) = [i for i in j.node_ids if ("replacement", i) in ex.calls]
    assert len(j.node_ids) == 2 and not ctl.nodes[new_id].replacement
    assert any(e.kind == "replica" for e in store.job_events(job.id))


def test_the_scheduler_filters_and_scores_with_the_reuse_by_age_plugin(tmp_path: Path, data_root: Path) -> None:
    _, _, ctl = _world(tmp_path, data_root, SimClock(start=0.0), {"V100": 2})
    reuse = ctl.scheduler.filters[-1]
    assert isinstance(reuse, ReuseByAge)
    assert ctl.scheduler.scores[-1] is reuse  # the last, tie-breaking key
    assert len(ctl.scheduler.scores) == len(make_scheduler("gfs").scores) + 1


def _deadline_run(tmp: Path, data_root: Path, mode: str) -> tuple[Job, WatchedFleet, Store]:
    """A 6 h deadline job due in 12 h on the replayed V100 traces (9 zones), zones seen ``mode``."""
    clock = SimClock(start=0.0)
    store = Store(tmp / f"{mode}.db")
    fleet = WatchedFleet.from_options(clock=clock, data_dir=data_root, seed=5,
                                       state_path=tmp / f"{mode}-fleet.db",
                                       lifetime_model=default_gce_model())
    settings = ControllerSettings(pool_nodes={"V100": 4, "H100": 2}, zone_observation=mode)
    ctl = Controller(store, fleet, clock, settings, epoch=store.take_controller_lease())
    t, _ = store.create_tenant("t", max_gpus=100)
    job = store.submit_job(t.id, JobSpec(name="d", kind="deadline", compute_hours=6.0,
                                         deadline_hours=12.0, accelerator="V100"), now=0.0)
    _run(ctl, clock, 12.5)
    return store.get_job(job.id), fleet, store


def test_with_zones_known_from_evidence_a_deadline_job_costs_what_it_costs_seeing_them_all(
        tmp_path: Path, data_root: Path) -> None:
    """zone_observation: evidence on the replayed traces: the job gets spotplane_probing, the
    provider's every-zone view is never read, each probe the fleet answered is counted and
    billed a minute of spot, and the job finishes in time for no more than +5 % over the same
    job seeing every zone for free."""
    free, free_fleet, _ = _deadline_run(tmp_path, data_root, "free")
    done, fleet, store = _deadline_run(tmp_path, data_root, "evidence")
    for j in (free, done):
        assert j.state is JobState.SUCCEEDED and j.finished_at is not None
        assert j.deadline_at is not None and j.finished_at <= j.deadline_at
    assert free_fleet.every_zone_asks > 0 and fleet.every_zone_asks == 0
    assert "spotplane_probing" in {d.policy for d in store.job_decisions(done.id)}
    metrics = store.metrics()
    probes = sum(v for k, v in metrics.items() if k.startswith("zone_probes_total"))
    assert probes == fleet.probe_calls > 0
    cost = sum(v for k, v in metrics.items() if k.startswith("zone_probe_cost_dollars"))
    assert 0 < cost < probes * 3.06 / 60  # a minute each, below even the on-demand price
    assert metrics["launches_refused_total"] > 0  # where it learned zones for free
    assert done.cost <= 1.05 * free.cost, (done.cost, free.cost)


def test_a_job_that_finished_as_its_node_went_succeeds_and_is_not_run_again(
        tmp_path: Path, data_root: Path) -> None:
    """The executor's "finished" and the node's loss arrive in one tick: the work is done, so
    the job succeeds; it is neither preempted nor started a second time."""
    clock, store, fleet, ex, ctl = _executor_world(tmp_path, data_root, {"V100": 2})
    t, _ = store.create_tenant("t")
    job = store.submit_job(t.id, JobSpec(name="f", kind="spot", compute_hours=1.0,
                                         accelerator="V100", entrypoint="python train.py"),
                           now=0.0)
    while job.id not in ex.started:
        clock.advance(60)
        ctl.tick()
    t0, j = ex.started[job.id], ctl.jobs[job.id]
    assert j.state is JobState.RUNNING
    clock.advance(t0 + 3600 + 30 - clock.now())  # past its hour of work ...
    fleet.terminate([ctl.nodes[j.node_ids[0]].instance_id or ""])  # ... and its node is gone
    ctl.tick()
    _run(ctl, clock, 0.2)
    done = store.get_job(job.id)
    assert done.state is JobState.SUCCEEDED, (done.state, done.message)
    assert done.preemptions == 0 and ex.calls.count(("start", job.id)) == 1
    assert done.progress_hours == pytest.approx(1.0)
    assert not [e for e in store.job_events(job.id) if e.kind == "preempted"]
