"""Each phase of the reconcile loop alone, on a hand-built LoopState.

Real parts: the real Store on a tmp SQLite file and a small fleet that really keeps its
instances (launch is idempotent on the intent id, spot can be refused, instances change state
with events). Each test asserts the exact state a phase leaves behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from clusters.fleet import (
    EventKind,
    InstanceState,
    LaunchRequest,
    Offer,
)
from controlplane.core.clock import SimClock
from controlplane.core.counters import counter_key
from controlplane.core.errors import InvalidInput
from controlplane.core.models import Job, JobSpec, JobState, Market, Node, NodeState, Tenant
from controlplane.core.readmodels import Quota
from controlplane.core.units import HOUR
from controlplane.reconcile.contracts import ControllerSettings, ExecutorReport, ReplicatingExecutor
from controlplane.reconcile.fleet import SyncFleet
from controlplane.reconcile.ingest import Ingest
from controlplane.reconcile.jobs import AdvanceJobs, ForgetFinished
from controlplane.reconcile.nodeops import NodeOps
from controlplane.reconcile.persist import Act, Persist, resume_intent
from controlplane.reconcile.placement import Place, ReapIdle, StoreQuota, _placeable, account_demand
from controlplane.reconcile.policies import AskPolicies
from controlplane.reconcile.policyhost import PolicyBook, PolicyFailed, PolicyRequest
from controlplane.reconcile.pool import Pool
from controlplane.reconcile.recorder import Recorder
from controlplane.reconcile.state import PROGRESS_FIELDS, LoopState, TickReport, TickWork
from controlplane.store import INTENT_DONE, INTENT_FAILED, INTENT_PENDING, Intent, Store
from policies.checkpoint import CheckpointIntervals
from policies.deadline import Action, DeadlineTask, Kind, Observation
from policies.preemption import WeibullModel, default_gce_model
from policies.schedulers import make_scheduler
from serve.metrics import build_registry, exposition
from tests.controlplane.keptfleet import KeptFleet

OFFERS = [
    Offer("aws", "us-a", "p3.2xlarge", "V100", 1, spot_price=1.0, on_demand_price=3.0,
          region="us"),
    Offer("aws", "us-b", "p3.2xlarge", "V100", 1, spot_price=0.8, on_demand_price=3.2,
          region="us"),
]


class ScriptedHost:
    """A deadline-policy host that answers what the test says (and remembers what it forgot)."""

    def __init__(self, answers: dict[str, Action | PolicyFailed]) -> None:
        self.answers = answers
        self.asked: list[PolicyRequest] = []
        self.forgotten: list[str] = []

    def decide(self, requests: Sequence[PolicyRequest]) -> dict[str, Action | PolicyFailed]:
        self.asked += requests
        return {r.job_id: self.answers[r.job_id] for r in requests if r.job_id in self.answers}

    def forget(self, job_ids: Sequence[str]) -> None:
        self.forgotten += job_ids


_INSTANCE_OF_NODE = {
    NodeState.PROVISIONING: InstanceState.PENDING, NodeState.READY: InstanceState.RUNNING,
    NodeState.NOTICED: InstanceState.NOTICED, NodeState.TERMINATING: InstanceState.RUNNING,
    NodeState.PREEMPTED: InstanceState.PREEMPTED, NodeState.TERMINATED: InstanceState.TERMINATED,
}


@dataclass
class World:
    clock: SimClock
    store: Store
    fleet: KeptFleet
    settings: ControllerSettings
    state: LoopState
    rec: Recorder
    ops: NodeOps
    tenant: Tenant

    def job(self, name: str, kind: str = "spot", workers: int = 1, **spec: object) -> Job:
        """A submitted job, known to the state in its stored (PENDING) form."""
        job = self.store.submit_job(self.tenant.id, JobSpec(
            name=name, kind=kind, workers=workers, compute_hours=spec.pop("compute_hours", 2.0),
            accelerator=spec.pop("accelerator", "V100"), **spec), now=0.0)
        self.state.jobs[job.id] = job
        return job

    def node(self, job: Job | None, state: NodeState, zone: str = "us-a",
             market: Market = Market.SPOT, **fields: object) -> Node:
        """A node on a real instance of the fleet, in ``state``, held by ``job``."""
        inst, = self.fleet.launch(LaunchRequest(f"intent-{len(self.fleet.instances)}", zone,
                                                "p3.2xlarge", market, 1))
        iid = inst.instance_id
        self.fleet.instances[iid] = replace(inst, state=_INSTANCE_OF_NODE[state])
        offer = next(o for o in OFFERS if o.zone == zone)
        n = Node(id=f"node-{inst.instance_id}", provider="kept", cloud="aws", zone=zone,
                 instance_type="p3.2xlarge", accelerator="V100", accelerator_count=1,
                 market=market, state=state, intent_id=inst.intent_id,
                 instance_id=iid, price_per_hour=inst.price_per_hour,
                 on_demand_price_per_hour=offer.on_demand_price, requested_at=0.0,
                 launched_at=0.0, job_id=job.id if job else None,
                 tenant_id=job.tenant_id if job else None, **fields)
        self.state.nodes[n.id] = n
        self.state.by_instance[iid] = n.id
        if job is not None:
            job.node_ids.append(n.id)
        return n


@pytest.fixture
def world(store_url: str) -> World:
    """Each phase over a real store, once per backend (``store_url``: SQLite, PostgreSQL)."""
    clock = SimClock(start=0.0)
    store = Store(store_url)
    fleet = KeptFleet(clock, OFFERS)
    settings = ControllerSettings()
    state = LoopState(offers=fleet.offers())
    rec = Recorder(state, fleet, None)
    ops = NodeOps(state, rec, fleet, settings, None)
    tenant, _ = store.create_tenant("t", max_gpus=4)
    return World(clock, store, fleet, settings, state, rec, ops, tenant)


def _transitions(w: TickWork, job: Job) -> list[tuple[str | None, str | None]]:
    return [(e.src, e.dst) for e in w.events if e.job_id == job.id and e.kind == "transition"]


# -- recording helpers --------------------------------------------------------------------------
def test_recorder_bills_each_node_for_the_time_it_served_the_job(world: World) -> None:
    job = world.job("a", workers=2)
    job.state, job.billed_at = JobState.RUNNING, 600.0
    a = world.node(job, NodeState.READY)  # spot in us-a: 1 $/h
    b = world.node(job, NodeState.PREEMPTED, zone="us-b")  # 0.8 $/h, gone at 1200 s
    b.ended_at = 1200.0
    job.mark_saved()
    world.rec.bill(job, 2400.0)
    assert a.price_per_hour == 1.0 and b.price_per_hour == 0.8
    assert job.cost == pytest.approx(1.0 * 1800 / HOUR + 0.8 * 600 / HOUR)
    assert job.gpu_hours == pytest.approx((1800 + 600) / HOUR)
    assert job.billed_at == 2400.0
    assert job.on_demand_cost == 0.0  # no progress yet
    # billing moves only progress fields: the job is saved on its progress schedule
    assert job.assigned == {"cost", "gpu_hours", "billed_at", "on_demand_cost", "bill"} <= PROGRESS_FIELDS


def test_recorder_plans_each_checkpoint_cost_with_its_own_planner(world: World) -> None:
    """Two spot jobs whose checkpoints cost 0.1 h and 0.4 h: each one's first checkpoint is due
    after the interval of its own DP planner (Eq. 9-13; the fleet has no lifetime model, so the
    default GCE one), not after the other's."""
    jobs = [world.job(f"c{i}", checkpoint_hours=ck) for i, ck in enumerate((0.1, 0.4))]
    for job in jobs:
        job.state, job.market, job.accounted_at = JobState.RUNNING, Market.SPOT, 0.0
        world.rec.progress(job, 60.0)
    due = [CheckpointIntervals(default_gce_model(), ck).interval_hours(0.0) for ck in (0.1, 0.4)]
    assert due[0] != due[1]
    assert [j.next_checkpoint_hours for j in jobs] == pytest.approx(due, rel=1e-12)
    assert [j.progress_hours for j in jobs] == pytest.approx([60.0 / HOUR] * 2, rel=1e-12)


def test_recorder_move_records_the_transition_and_counts_the_end(world: World) -> None:
    job = world.job("a")
    job.mark_saved()  # as loaded from the store
    world.rec.move(job, JobState.QUEUED, "accepted", 10.0)
    world.rec.move(job, JobState.CANCELLED, "cancelled", 20.0)
    w = world.state.work
    assert job.state is JobState.CANCELLED and job.finished_at == 20.0
    assert _transitions(w, job) == [("PENDING", "QUEUED"), ("QUEUED", "CANCELLED")]
    assert w.counters == {"jobs_cancelled_total": 1.0}
    assert job.assigned == {"state", "message", "finished_at"}  # saved at the tick


def test_recorder_observes_deadline_slack_only_when_a_deadline_job_succeeds(
        world: World) -> None:
    dl = world.job("d", kind="deadline", deadline_hours=10.0)  # due at 36,000 s
    world.rec.move(dl, JobState.QUEUED, "accepted", 10.0)
    assert world.state.work.counters == {}
    dl.state, dl.finished_at = JobState.RUNNING, 30_000.0
    world.rec.move(dl, JobState.SUCCEEDED, "done", 30_000.0)
    assert world.state.work.counters["deadline_slack_at_finish_seconds:sum"] == 6_000.0
    assert world.state.work.counters["deadline_slack_at_finish_seconds:count"] == 1.0
    assert "deadline_misses_total" not in world.state.work.counters


def test_quarantine_job_fails_it_and_terminates_its_nodes(world: World) -> None:
    job = world.job("a")
    job.state = JobState.RUNNING
    n = world.node(job, NodeState.READY)
    world.ops.quarantine_job(job, 300.0, "its policy raised")
    w = world.state.work
    assert job.state is JobState.FAILED and job.message == "quarantined: its policy raised"
    assert job.node_ids == [] and n.job_id is None
    assert n.state is NodeState.TERMINATING and n.ended_at == 300.0
    assert [ids for _, ids in w.terminations] == [[n.instance_id]]
    assert ("jobs", job.id) in world.state.admission.quarantined
    assert [b.id for b in w.quarantine] == [job.id]
    assert w.counters == {"rows_quarantined_total": 1.0, "jobs_failed_total": 1.0}


# -- 1. ingest ----------------------------------------------------------------------------------
def test_ingest_queues_new_jobs_then_cancels_a_flagged_one(world: World) -> None:
    job = world.store.submit_job(world.tenant.id, JobSpec(name="a", compute_hours=1.0), now=0.0)
    ingest = Ingest(world.store, world.state, world.rec, world.ops)
    ingest.run(60.0)
    w = world.state.work
    assert list(world.state.jobs) == [job.id]
    assert world.state.jobs[job.id].state is JobState.QUEUED
    assert list(world.state.tenants) == [world.tenant.id]
    assert _transitions(w, job) == [("PENDING", "QUEUED")]

    world.state.work = w = TickWork()
    world.store.request_cancel(job.id)
    ingest.run(120.0)
    held = world.state.jobs[job.id]
    assert held.state is JobState.CANCELLED and held.finished_at == 120.0
    assert held.cancel_requested
    assert _transitions(w, held) == [("QUEUED", "CANCELLED")]
    assert w.counters == {"jobs_cancelled_total": 1.0}


# -- 2. sync fleet ------------------------------------------------------------------------------
def test_sync_fleet_folds_ready_notice_and_preemption_into_nodes(world: World) -> None:
    s = world.state
    job = world.job("a", workers=2)
    up = world.node(None, NodeState.PROVISIONING)
    noticed = world.node(job, NodeState.READY)
    gone = world.node(job, NodeState.READY, zone="us-b")
    calm = world.node(None, NodeState.READY)
    for n in (up, noticed, gone, calm):
        n.mark_saved()  # as loaded from the store
    world.fleet.become(up.instance_id or "", InstanceState.RUNNING, EventKind.READY, 100.0)
    world.fleet.become(noticed.instance_id or "", InstanceState.NOTICED,
                       EventKind.PREEMPTION_NOTICE, 110.0, seconds_left=120.0)
    world.fleet.become(gone.instance_id or "", InstanceState.PREEMPTED, EventKind.PREEMPTED,
                       115.0)
    world.fleet.spot_up["us-b"] = False
    SyncFleet(world.fleet, world.store, world.settings, s, world.rec).run(120.0)
    assert (up.state, up.ready_at, up.idle_since) == (NodeState.READY, 100.0, 100.0)
    assert (noticed.state, noticed.notice_at) == (NodeState.NOTICED, 110.0)
    assert (gone.state, gone.ended_at) == (NodeState.PREEMPTED, 115.0)
    assert s.work.notices == {noticed.id: 120.0}
    assert s.fleet.zone_preemptions == {"us-b": [115.0]}
    assert s.fleet.availability == {"us-a": True, "us-b": False}
    assert s.work.counters["nodes_preempted_total"] == 1.0
    assert {n.id for n in s.nodes.values() if n.assigned} == {up.id, noticed.id, gone.id}
    zones = {z.zone: z.spot_available for z in world.store.zones()}  # tick 0 writes them
    assert zones == {"us-a": True, "us-b": False}


def test_sync_fleet_takes_a_node_agents_notice_first(world: World) -> None:
    n = world.node(None, NodeState.READY)
    sync = SyncFleet(world.fleet, world.store, world.settings, world.state, world.rec)
    sync.external_notice(n.instance_id or "", 90)
    sync.run(200.0)
    assert (n.state, n.notice_at) == (NodeState.NOTICED, 200.0)
    assert world.state.work.notices == {n.id: 90.0}
    assert world.state.fleet.external == {}


def test_sync_fleet_takes_the_nodes_reports_from_the_store(world: World) -> None:
    """A node's notice through the API is an agent's notice; a failed boot fails the node with
    the log's last lines and asks for its instance's termination, once."""
    job = world.job("a")
    noticed, broken = world.node(None, NodeState.READY), world.node(job, NodeState.READY)
    world.store.put_node_report(noticed.instance_id or "", "notice", {"seconds_left": 80.0})
    world.store.put_node_report(broken.instance_id or "", "boot_failed", {
        "reason": "bootstrap failed", "log_tail": "\n".join(f"line {i}" for i in range(40))})
    world.store.put_node_report("i-unknown", "boot_failed", {"reason": "bootstrap failed"})
    sync = SyncFleet(world.fleet, world.store, world.settings, world.state, world.rec, world.ops)
    sync.run(300.0)
    assert (noticed.state, noticed.notice_at) == (NodeState.NOTICED, 300.0)
    assert (broken.state, broken.ended_at) == (NodeState.FAILED, 300.0)
    [event] = [e for e in world.state.work.events if e.node_id == broken.id]
    assert event.cause.startswith(f"bootstrap failed on {broken.instance_id}:\nline 28\n")
    assert event.cause.endswith("line 39") and event.dst == "FAILED"
    assert [ids for _, ids in world.state.work.terminations] == [[broken.instance_id]]
    assert world.state.work.counters["nodes_boot_failed_total"] == 1.0
    assert world.store.take_node_reports() == []
    world.fleet.become(broken.instance_id or "", InstanceState.TERMINATED, EventKind.TERMINATED, 310.0)
    sync.run(320.0)  # the cloud's own word comes later: the node stays FAILED
    assert broken.state is NodeState.FAILED and len(world.state.work.terminations) == 1


def test_evidence_mode_knows_a_zone_from_its_nodes_and_the_probes_a_policy_asked_for(
        world: World) -> None:
    """zone_observation: evidence. A zone never seen is believed up; a spot node running or
    preempted there says up or down; a probe is bought only where a policy asked, billed
    probe_minutes of the zone's spot node; the provider is never asked for every zone."""
    s, fleet = world.state, world.fleet
    settings = ControllerSettings(zone_observation="evidence")
    sync = SyncFleet(fleet, world.store, settings, s, world.rec)
    a = world.node(None, NodeState.PROVISIONING)
    b = world.node(None, NodeState.READY, zone="us-b")
    fleet.spot_up["us-b"] = False  # the truth, not yet seen
    sync.run(60.0)
    assert s.fleet.availability == {"us-a": True, "us-b": True} and fleet.probed == []
    fleet.become(a.instance_id or "", InstanceState.RUNNING, EventKind.READY, 100.0)
    fleet.become(b.instance_id or "", InstanceState.PREEMPTED, EventKind.PREEMPTED, 110.0)
    sync.run(120.0)
    assert s.fleet.availability == {"us-a": True, "us-b": False} and fleet.probed == []
    fleet.spot_up["us-b"] = True  # back: unseen until a probe
    sync.run(180.0)
    assert s.fleet.availability["us-b"] is False
    s.fleet.probes = {"us-b"}
    sync.run(240.0)
    assert fleet.probed == [("us-b", "p3.2xlarge")] and s.fleet.probes == set()
    assert s.fleet.availability == {"us-a": True, "us-b": True}
    assert s.work.counters[counter_key("zone_probes_total", provider="kept", zone="us-b")] == 1.0
    assert s.work.counters[counter_key("zone_probe_cost_dollars_total", provider="kept")] == (
        pytest.approx(0.8 / 60))  # one minute of us-b's 0.8 $/h spot node


def test_a_probing_policy_asks_for_the_cheaper_zone_believed_down_while_on_spot(
        world: World) -> None:
    """With zones known from evidence, a multi-zone deadline job gets spotplane_probing; on spot
    in us-a (1.0 $/h) with us-b (0.8 $/h) believed down, it asks for one probe of us-b."""
    settings = ControllerSettings(zone_observation="evidence")
    job = world.job("a", kind="deadline", deadline_hours=10.0)
    job.state, job.market, job.zone = JobState.RUNNING, Market.SPOT, "us-a"
    job.accounted_at = job.billed_at = 600.0
    world.node(job, NodeState.READY)
    world.state.fleet.availability = {"us-a": True, "us-b": False}
    AskPolicies(PolicyBook(), settings, world.state, world.rec, world.ops).run(600.0)
    assert [(d.policy, d.action) for d in world.state.work.decisions] == [
        ("spotplane_probing", "spot")]
    assert world.state.fleet.probes == {"us-b"}


def test_an_unknown_zone_observation_names_the_field_and_the_choices(world: World) -> None:
    with pytest.raises(InvalidInput, match="zone_observation.*use one of free, evidence"):
        SyncFleet(world.fleet, world.store, ControllerSettings(zone_observation="psychic"),
                  world.state, world.rec)


# -- 3. advance jobs ----------------------------------------------------------------------------
def _advance(world: World) -> AdvanceJobs:
    return AdvanceJobs(world.state, world.rec, world.ops, None, world.clock)


def test_advance_starts_a_gang_when_every_worker_is_ready(world: World) -> None:
    job = world.job("a", kind="hp", workers=2)
    job.state, job.market, job.zone = JobState.STARTING, Market.ON_DEMAND, "us-a"
    job.accounted_at = job.billed_at = 50.0
    a = world.node(job, NodeState.READY, market=Market.ON_DEMAND, ready_at=100.0)
    world.node(job, NodeState.READY, market=Market.ON_DEMAND, ready_at=130.0)
    _advance(world).run(200.0)
    assert job.state is JobState.RUNNING and job.started_at == 130.0
    assert job.accounted_at == 200.0
    assert job.progress_hours == 0.0  # 70 s of the 180 s changeover
    assert job.segment_node_age_hours == pytest.approx(130.0 / HOUR)  # launched at 0, up at 130 s
    assert a.price_per_hour == 3.0
    assert job.cost == pytest.approx(2 * 3.0 * 150 / HOUR)
    assert _transitions(world.state.work, job) == [("STARTING", "RUNNING")]


def test_advance_finishes_a_bag_job_and_counts_it_for_its_bag(world: World) -> None:
    """0.1 h of work left at 1 $/h spot: done 360 s into a 600 s tick, then released."""
    job = world.job("a", compute_hours=1.0)
    job.bag_id = "bag-1"
    job.state, job.market, job.zone = JobState.RUNNING, Market.SPOT, "us-a"
    job.accounted_at = job.billed_at = 0.0
    job.progress_hours = job.checkpointed_hours = 0.9
    job.next_checkpoint_hours = 2.0  # no checkpoint due before the end
    n = world.node(job, NodeState.READY)
    _advance(world).run(600.0)
    assert job.state is JobState.SUCCEEDED and job.finished_at == pytest.approx(360.0)
    assert world.state.work.counters["bag_jobs_succeeded_total"] == 1.0
    assert (n.job_id, n.idle_since) == (None, 600.0)


def test_advance_requeues_a_job_that_lost_a_worker(world: World) -> None:
    job = world.job("a", workers=2)
    job.state, job.market, job.zone = JobState.RUNNING, Market.SPOT, "us-a"
    job.accounted_at = job.billed_at = 500.0
    lost = world.node(job, NodeState.PREEMPTED, ended_at=500.0)
    kept = world.node(job, NodeState.READY)
    _advance(world).run(560.0)
    w = world.state.work
    assert job.state is JobState.QUEUED and job.preemptions == 1 and job.node_ids == []
    assert lost.job_id is None and kept.job_id is None
    assert (kept.state, kept.ended_at) == (NodeState.TERMINATING, 560.0)
    assert [ids for _, ids in w.terminations] == [[kept.instance_id]]
    assert _transitions(w, job) == [("RUNNING", "PREEMPTED"), ("PREEMPTED", "QUEUED")]
    assert w.counters["job_preemptions_total"] == 1.0


def test_forget_finished_drops_terminal_jobs_and_gone_nodes(world: World) -> None:
    done = world.job("done", kind="deadline", deadline_hours=10.0)
    live = world.job("live")
    done.state, live.state = JobState.SUCCEEDED, JobState.QUEUED
    gone = world.node(None, NodeState.TERMINATED)
    up = world.node(None, NodeState.READY)
    host = ScriptedHost({})
    ForgetFinished(world.store, host, world.state).run()
    assert list(world.state.jobs) == [live.id]
    assert list(world.state.nodes) == [up.id]
    assert gone.instance_id not in world.state.by_instance
    assert host.forgotten == [done.id]


# -- 4. policies --------------------------------------------------------------------------------
def test_policies_switch_a_job_and_quarantine_a_failed_policy(world: World) -> None:
    job = world.job("a", kind="deadline", deadline_hours=10.0)
    bad = world.job("b", kind="deadline", deadline_hours=10.0)
    done = world.job("c", kind="deadline", deadline_hours=10.0)
    done.state = JobState.SUCCEEDED  # finished earlier in the tick: no policy is asked
    job.state, job.market, job.zone = JobState.RUNNING, Market.SPOT, "us-a"
    job.accounted_at = job.billed_at = 600.0
    job.progress_hours, job.changeover_left_hours = 0.5, 0.25  # mid-changeover when it switches
    bad.state = JobState.QUEUED
    n = world.node(job, NodeState.READY)
    world.state.fleet.availability = {"us-a": True, "us-b": False}
    host = ScriptedHost({job.id: Action(Kind.ON_DEMAND), bad.id: PolicyFailed("boom")})
    AskPolicies(host, world.settings, world.state, world.rec, world.ops).run(600.0)
    w = world.state.work
    (asked, _) = host.asked
    assert asked.obs.state is Kind.SPOT and asked.obs.zone == "us-a" and asked.obs.spot_available
    assert asked.task.compute_hours == 2.0 and asked.policy == "spotplane"  # two zones: the multi-zone default
    assert [(d.job_id, d.policy, d.action) for d in w.decisions] == [
        (job.id, "spotplane", "on_demand")]
    assert job.policy_action == "on_demand"
    assert job.state is JobState.QUEUED and job.message == "policy: switch spot -> on_demand"
    # a voluntary switch keeps the progress as checkpointed and owes no changeover yet
    assert (job.checkpointed_hours, job.changeover_left_hours) == (job.progress_hours, 0.0)
    assert (n.state, n.job_id, n.idle_since) == (NodeState.READY, None, 600.0)
    assert bad.state is JobState.FAILED and bad.message == "quarantined: boom"
    assert done.state is JobState.SUCCEEDED and done.id not in {r.job_id for r in host.asked}


# -- 5. placement -------------------------------------------------------------------------------
def _place(world: World) -> Place:
    return Place(make_scheduler("gfs", seed=0), StoreQuota(world.store, world.state),
                 world.settings, world.state, world.rec, world.ops)


def test_place_launches_a_gang_fails_the_unplaceable_and_keeps_tenant_limits(world: World) -> None:
    hp = world.job("hp", kind="hp", workers=2, gpus_per_worker=1)
    a100 = world.job("x", kind="hp", accelerator="A100")
    spot = world.job("sp", kind="spot", workers=3)
    for j in (hp, a100, spot):
        j.state = JobState.QUEUED
    world.state.tenants = {world.tenant.id: world.tenant}  # max 4 GPUs
    world.state.fleet.availability = {"us-a": True, "us-b": True}
    _place(world).run(60.0)
    w = world.state.work
    assert hp.state is JobState.STARTING
    assert (hp.market, hp.zone, hp.attempts) == (Market.ON_DEMAND, "us-a", 1)  # cheaper on-demand
    assert (hp.billed_at, hp.accounted_at) == (60.0, 60.0)
    nodes = [world.state.nodes[i] for i in hp.node_ids]
    assert [(n.state, n.job_id, n.price_per_hour) for n in nodes] == [
        (NodeState.REQUESTED, hp.id, 3.0)] * 2
    (intent, req, node_ids), = w.launches
    assert (req.zone, req.market, req.count, node_ids) == ("us-a", Market.ON_DEMAND, 2,
                                                           hp.node_ids)
    assert intent.payload["job_id"] == hp.id and w.intents == [intent]
    assert a100.state is JobState.FAILED
    assert a100.message == ("no zone offers A100 with 1 GPUs per worker; the fleet has V100x1")
    assert spot.state is JobState.QUEUED and spot.message == "waiting: tenant limit: 4 GPUs"
    assert [(d.job_id, d.action) for d in w.decisions] == [(hp.id, "place"), (spot.id, "wait")]


def test_reap_idle_terminates_what_no_job_holds(world: World) -> None:
    old = world.node(None, NodeState.READY, idle_since=0.0)
    fresh = world.node(None, NodeState.READY, idle_since=100.0)
    booting = world.node(None, NodeState.PROVISIONING)
    held = world.node(world.job("a"), NodeState.READY)
    ReapIdle(world.settings, world.state, world.ops).run(150.0)  # idle_node_seconds = 120
    assert old.state is NodeState.TERMINATING and booting.state is NodeState.TERMINATING
    assert fresh.state is NodeState.READY and held.state is NodeState.READY
    assert [ids for _, ids in world.state.work.terminations] == [[old.instance_id],
                                                                 [booting.instance_id]]
    assert world.state.work.counters["idle_cost_dollars"] == pytest.approx(1.0 * 150 / HOUR)


def test_account_demand_splits_hp_and_spot_gpu_hours_per_tenant(world: World) -> None:
    world.job("hp", kind="hp", workers=2).state = JobState.RUNNING
    world.job("sp", kind="spot", workers=3).state = JobState.QUEUED
    world.job("old", kind="spot").state = JobState.SUCCEEDED
    world.job("gang", kind="hp", workers=4).state = JobState.QUEUED  # holds no GPU: not demand
    world.job("late", kind="spot").state = JobState.QUEUED  # after the skipped ones: counted
    tick_h = world.settings.tick_seconds / HOUR
    assert account_demand(world.state, world.settings) == {
        world.tenant.id: (pytest.approx(2 * tick_h), pytest.approx(4 * tick_h))}


# -- 6. persist intents, act, persist -----------------------------------------------------------
def test_intents_are_durable_before_the_fleet_is_called_then_done(world: World) -> None:
    hp = world.job("hp", kind="hp", workers=2)
    hp.state = JobState.QUEUED
    _place(world).run(60.0)
    persist = Persist(world.store, world.settings, world.state, None)
    persist.intents(60.0, {})
    (stored,) = world.store.pending_intents()
    assert stored.kind == "launch" and stored.payload["node_ids"] == hp.node_ids
    assert world.fleet.instances == {} and world.store.get_job(hp.id).state is JobState.STARTING
    world.state.work.report = report = TickReport(at=60.0, ms=0.0, jobs=1, nodes=0)
    Act(world.fleet, world.store, world.state, world.rec, world.ops).run(60.0)
    assert report.launched == 2 and world.state.work.counters["nodes_launched_total"] == 2.0
    nodes = [world.state.nodes[i] for i in hp.node_ids]
    assert [n.state for n in nodes] == [NodeState.PROVISIONING] * 2
    assert sorted(world.fleet.instances) == sorted(n.instance_id for n in nodes)
    assert {world.state.by_instance[n.instance_id or ""] for n in nodes} == set(hp.node_ids)
    persist.results(60.0)
    assert world.store.pending_intents() == []
    assert [i.status for i in world.store.intents("launch")] == [INTENT_DONE]
    stored_nodes = world.store.job_nodes(hp.id, hp.node_ids)
    assert sorted(n.instance_id or "" for n in stored_nodes) == sorted(world.fleet.instances)
    assert world.state.work.launches == [] and world.state.work.intents == []


def test_a_refused_spot_launch_fails_its_nodes_and_requeues_the_job(world: World) -> None:
    spot = world.job("sp", kind="spot", workers=1)
    spot.state = JobState.QUEUED
    world.state.fleet.availability = {"us-a": True, "us-b": True}
    _place(world).run(60.0)
    assert spot.zone == "us-b"  # the cheaper spot zone
    (node,) = [world.state.nodes[i] for i in spot.node_ids]
    world.fleet.spot_up["us-b"] = False
    Persist(world.store, world.settings, world.state, None).intents(60.0, {})
    assert [i.status for i in world.store.pending_intents()] == [INTENT_PENDING]
    Act(world.fleet, world.store, world.state, world.rec, world.ops).run(60.0)
    w = world.state.work
    assert (node.state, node.ended_at) == (NodeState.FAILED, 60.0)
    assert spot.state is JobState.QUEUED and spot.preemptions == 0 and spot.node_ids == []
    assert world.state.fleet.refused == {"us-b": 60.0}
    assert world.state.fleet.evidence == {"us-b": False}  # a refused launch: known down, for free
    assert w.counters["launches_refused_total"] == 1.0
    assert [i.status for i in w.intents] == [INTENT_FAILED]
    assert world.fleet.instances == {}


def test_a_resumed_launch_intent_names_its_job_so_a_refusal_requeues_it(world: World) -> None:
    """After a crash between the intent's write and the launch, recovery rebuilds the launch
    from the stored intent alone; the job id it carries is what lets a refusal requeue the job."""
    spot = world.job("sp", kind="spot", workers=1)
    spot.state = JobState.QUEUED
    world.state.fleet.availability = {"us-a": True, "us-b": True}
    _place(world).run(60.0)
    Persist(world.store, world.settings, world.state, None).intents(60.0, {})
    (stored,) = world.store.pending_intents()
    world.state.work = w = TickWork()  # the crashed tick's work is gone
    resume_intent(w, stored, 120.0)
    ((intent, req, node_ids),) = w.launches
    assert intent.id == stored.id and node_ids == spot.node_ids
    assert (req.intent_id, req.zone, req.market, req.count, req.tags) == (
        stored.id, "us-b", Market.SPOT, 1, {"job_id": spot.id})
    world.fleet.spot_up["us-b"] = False
    Act(world.fleet, world.store, world.state, world.rec, world.ops).run(120.0)
    assert spot.state is JobState.QUEUED and spot.preemptions == 0 and spot.node_ids == []
    assert [i.status for i in w.intents] == [INTENT_FAILED]


def test_a_stored_intent_that_does_not_load_is_failed_not_applied() -> None:
    w = TickWork()
    bad = Intent(id="launch-1", kind="launch", created_at=0.0, payload={"zone": "us-a"})
    resume_intent(w, bad, 30.0)
    assert w.launches == [] and w.intents == [bad]
    assert (bad.status, bad.done_at) == (INTENT_FAILED, 30.0)


def test_placeable_drops_only_the_spot_jobs_of_a_full_pool(world: World) -> None:
    spot, hp = world.job("s", kind="spot"), world.job("h", kind="hp")
    assert _placeable([spot, hp], {"V100": Pool("V100", 1)}) == [spot, hp]  # a free card: all may fit
    assert _placeable([spot, hp], {"V100": Pool("V100", 0)}) == [hp]  # full: HP may still evict


def test_store_quota_is_reread_every_tenth_tick(world: World) -> None:
    def quota(gpus: int) -> Quota:
        return Quota(pool="default", accelerator="V100", capacity_gpus=8, spot_quota_gpus=gpus, updated_at=0.0)

    world.store.set_quotas([quota(3)])
    source = StoreQuota(world.store, world.state)
    world.state.ticks = 0
    assert source("V100") == 3.0
    world.store.set_quotas([quota(5)])
    world.state.ticks = 9
    assert source("V100") == 3.0  # cached between refreshes
    world.state.ticks = 10
    assert source("V100") == 5.0
    assert source("A100") is None


def test_an_on_demand_job_checkpoints_only_after_its_remaining_work_plus_an_hour(world: World) -> None:
    job = world.job("od", compute_hours=2.0)
    job.state, job.market, job.accounted_at, job.progress_hours = JobState.RUNNING, Market.ON_DEMAND, 0.0, 0.5
    world.rec.progress(job, 60.0)
    # nothing preempts on-demand: the next checkpoint is past the end, 0.5 + (2.0 - 0.5) + 1 h
    assert job.next_checkpoint_hours == pytest.approx(3.0, rel=1e-12)
    assert job.progress_hours == pytest.approx(0.5 + 60.0 / HOUR, rel=1e-12)


def test_terminating_a_gone_node_changes_nothing(world: World) -> None:
    gone = world.node(None, NodeState.PREEMPTED, ended_at=5.0)
    world.ops.terminate(gone, 10.0, "cleanup")
    assert gone.state is NodeState.PREEMPTED and gone.ended_at == 5.0
    assert world.state.work.terminations == [] and world.state.work.events == []


def test_a_notice_on_a_job_never_accounted_checkpoints_from_the_notice(world: World) -> None:
    job = world.job("a", compute_hours=2.0, checkpoint_hours=0.01)
    job.state, job.market, job.zone = JobState.RUNNING, Market.SPOT, "us-a"
    job.billed_at, job.accounted_at = 0.0, None
    n = world.node(job, NodeState.NOTICED, notice_at=100.0)
    world.state.work.notices[n.id] = 120.0
    _advance(world).run(160.0)
    # no earlier account: counted from the notice at 100 s (nothing to checkpoint yet), so
    # 60 s of work to the tick at 160 s
    assert job.state is JobState.RUNNING and job.checkpoints == 0
    assert job.accounted_at == 160.0 and job.progress_hours == pytest.approx(60.0 / HOUR, rel=1e-9)
    assert [e.kind for e in world.state.work.events if e.job_id == job.id][-1] == "notice"


def test_a_gang_deadline_job_is_priced_per_gang_and_its_policy_state_is_stored(world: World) -> None:
    job = world.job("g", kind="deadline", workers=2, deadline_hours=10.0, compute_hours=2.0)
    ask = AskPolicies(ScriptedHost({}), world.settings, world.state, world.rec, world.ops)
    req = ask._request(job, 0.0)
    assert req is not None
    # the cheapest spot (us-b, 0.8 $/h) and on-demand (us-a, 3.0 $/h), times the 2 workers
    assert (req.task.spot_price, req.task.on_demand_price, req.task.nodes) == (1.6, 6.0, 2)
    (action,) = PolicyBook(world.store).decide([req]).values()
    assert isinstance(action, Action)
    state = world.store.policy_state(job.id)
    assert state is not None and state == PolicyBook(world.store)._policy(req).state_dict()


class _Replicas(ReplicatingExecutor):
    """An executor whose other replica always survives; it records the replacements."""

    def __init__(self) -> None:
        self.replaced: list[str] = []

    def start(self, job: Job, nodes: Sequence[Node]) -> None: ...

    def stop(self, job: Job, reason: str) -> None: ...

    def notice(self, job: Job, seconds_left: float) -> None: ...

    def poll(self, jobs: Sequence[Job]) -> dict[str, ExecutorReport]:
        return {}

    def node_preempted(self, job: Job, node_id: str, reason: str = "") -> bool:
        return True

    def start_replacement(self, job: Job, node: Node) -> None:
        self.replaced.append(node.id)


def test_a_lost_replica_is_replaced_in_the_best_spot_zone(world: World) -> None:
    """The survivor keeps the job running; placement, not the job phase, launches the
    replacement, in the cheapest open spot zone."""
    job = world.job("r", kind="spot", replicas=2, entrypoint="python train.py")
    job.state, job.market, job.zone = JobState.RUNNING, Market.SPOT, "us-a"
    job.accounted_at = job.billed_at = 500.0
    lost = world.node(job, NodeState.PREEMPTED, ended_at=500.0)
    kept = world.node(job, NodeState.READY)
    world.state.fleet.availability = {"us-a": True, "us-b": True}
    AdvanceJobs(world.state, world.rec, world.ops, _Replicas(), world.clock).run(560.0)
    assert job.state is JobState.RUNNING and job.preemptions == 0
    assert job.node_ids == [kept.id] and lost.job_id is None and not world.state.work.launches
    assert world.state.work.counters["replica_replacements_total"] == 1.0
    _place(world).run(560.0)
    new_id = job.node_ids[-1]
    assert job.node_ids == [kept.id, new_id]
    new = world.state.nodes[new_id]
    # us-b's spot (0.8 $/h) is cheaper than us-a's (1.0 $/h): the replacement goes there
    assert (new.zone, new.market, new.replacement) == ("us-b", Market.SPOT, True)
    (decision,) = [d for d in world.state.work.decisions if d.action == "replace"]
    assert decision.reason == "1 replacement spot node(s) in us-b"


def test_a_replacement_waits_for_room_in_its_pool_then_launches(world: World) -> None:
    """A replacement is a request like any other: a full pool makes it wait (one decision
    saying why), and it launches once a slot frees."""
    job = world.job("r", kind="spot", replicas=2, entrypoint="python train.py")
    job.state, job.market, job.zone = JobState.RUNNING, Market.SPOT, "us-a"
    job.accounted_at = job.billed_at = 500.0
    world.node(job, NodeState.PREEMPTED, ended_at=500.0)
    kept = world.node(job, NodeState.READY)
    world.state.fleet.availability = {"us-a": True, "us-b": True}
    AdvanceJobs(world.state, world.rec, world.ops, _Replicas(), world.clock).run(560.0)
    world.settings.pool_nodes = {kept.accelerator: 1}
    place = _place(world)
    place.run(560.0)
    place.run(620.0)
    assert job.node_ids == [kept.id] and not world.state.work.launches
    (wait,) = [d for d in world.state.work.decisions if d.action == "wait"]
    assert wait.reason == f"replacement replicas: 0 free of 1 {kept.accelerator} node slots"
    world.settings.pool_nodes = {kept.accelerator: 2}
    place.run(680.0)
    assert len(job.node_ids) == 2 and len(world.state.work.launches) == 1


def test_a_replica_replacement_event_is_the_tenants_with_its_exact_cause(world: World) -> None:
    job = world.job("r", kind="spot", replicas=2, entrypoint="python train.py")
    job.state, job.market, job.zone = JobState.RUNNING, Market.SPOT, "us-a"
    job.accounted_at = job.billed_at = 500.0
    lost = world.node(job, NodeState.PREEMPTED, ended_at=500.0)
    world.node(job, NodeState.READY)
    world.state.fleet.availability = {"us-a": True, "us-b": True}
    AdvanceJobs(world.state, world.rec, world.ops, _Replicas(), world.clock).run(560.0)
    (ev,) = [e for e in world.state.work.events if e.kind == "replica"]
    assert (ev.at, ev.tenant_id, ev.job_id, ev.cause) == (
        560.0, world.tenant.id, job.id,
        f"1 replica node(s) lost ({lost.id}); a replica survives, 1 replacement(s) requested")
    world.store.commit(events=[ev])
    assert [(e.kind, e.tenant_id) for e in world.store.job_events(job.id, world.tenant.id)] == [
        ("replica", world.tenant.id)]


def test_a_forgotten_jobs_policy_and_saved_state_leave_the_books_memory(world: World) -> None:
    """A finished deadline job's policy and the last state written for it are dropped; the
    other job's stay."""
    a = world.job("a", kind="deadline", deadline_hours=10.0, compute_hours=2.0)
    b = world.job("b", kind="deadline", deadline_hours=10.0, compute_hours=2.0)
    ask = AskPolicies(ScriptedHost({}), world.settings, world.state, world.rec, world.ops)
    reqs = [ask._request(j, 0.0) for j in (a, b)]
    book = PolicyBook(world.store)
    book.decide([r for r in reqs if r is not None])
    assert sorted(book.policies) == sorted(book._saved) == sorted([a.id, b.id])
    book.forget([a.id])
    assert (list(book.policies), list(book._saved)) == ([b.id], [b.id])
    assert len(book) == 1


def test_launch_counters_carry_the_provider_and_a_refusals_error_as_prometheus_labels(
        world: World) -> None:
    """One tick: the HP gang's on-demand launch (2 nodes) is accepted, the spot launch in us-b
    refused; the scrape shows each with its provider and the refusal with its exception type."""
    hp, spot = world.job("hp", kind="hp", workers=2), world.job("sp", kind="spot")
    hp.state = spot.state = JobState.QUEUED
    world.state.tenants = {world.tenant.id: world.tenant}
    world.state.fleet.availability = {"us-a": True, "us-b": True}
    _place(world).run(60.0)
    assert (hp.market, spot.zone) == (Market.ON_DEMAND, "us-b")
    world.fleet.spot_up["us-b"] = False
    Persist(world.store, world.settings, world.state, None).intents(60.0, {})
    Act(world.fleet, world.store, world.state, world.rec, world.ops).run(60.0)
    world.store.commit(counters=world.state.work.counters)
    text = exposition(build_registry(world.store)).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}

    def samples(name: str) -> list[tuple[dict[str, str], float]]:
        return [(s.labels, s.value) for s in fams[f"spotplane_{name}"].samples
                if s.name == f"spotplane_{name}_total"]

    assert samples("launches") == [({"provider": "kept", "market": "on_demand"}, 1.0)]
    assert samples("launched_nodes") == [({"provider": "kept", "market": "on_demand"}, 2.0)]
    assert samples("launch_failures") == [
        ({"provider": "kept", "error": "CapacityUnavailable"}, 1.0)]


def test_recorded_decisions_and_node_events_carry_the_jobs_tenant(world: World) -> None:
    """A tenant's listings are read by tenant id: the decision and the node event have it."""
    job = world.job("d", kind="deadline", deadline_hours=10.0)
    n = world.node(job, NodeState.READY)
    world.rec.decide(job, "greedy", "spot", "spot is up", 60.0, "us-a")
    world.rec.node_event(n, "ready", 60.0)
    w = world.state.work
    (d,) = w.decisions
    assert (d.at, d.job_id, d.tenant_id, d.action, d.zone) == (60.0, job.id, world.tenant.id, "spot", "us-a")
    (ev,) = [e for e in w.events if e.kind == "node"]
    assert (ev.at, ev.tenant_id, ev.job_id, ev.node_id, ev.dst) == (
        60.0, world.tenant.id, job.id, n.id, "READY")


def test_a_live_probing_policy_probes_while_idle_and_a_replays_does_not() -> None:
    """A request with a retry time (a live controller's) builds spotplane_probing with
    probe_idle and that retry time; one without (a replay's) builds the plain one."""
    task = DeadlineTask(4.0, 10.0, 0.1)
    obs = Observation(0.0, 0.0, Kind.IDLE, None, True)
    live = PolicyBook()._policy(PolicyRequest("j1", "spotplane_probing", task, obs, 0.1, retry_hours=0.25))
    replay = PolicyBook()._policy(PolicyRequest("j2", "spotplane_probing", task, obs))
    assert (live.probe_idle, live.retry_hours) == (True, 0.25)  # type: ignore[attr-defined]
    assert replay.probe_idle is False  # type: ignore[attr-defined]


def test_the_checkpoint_planner_uses_the_fleets_own_lifetime_model(world: World) -> None:
    """A fleet whose spot VMs follow another model (a Weibull of scale 5 h, limit 24 h): the
    first checkpoint is due after that model's DP interval, not the default GCE one's."""
    model = WeibullModel(shape=0.8, scale=5.0)
    world.fleet.lifetimes = model
    job = world.job("c", checkpoint_hours=0.1)
    job.state, job.market, job.accounted_at = JobState.RUNNING, Market.SPOT, 0.0
    world.rec.progress(job, 60.0)
    due = CheckpointIntervals(model, 0.1).interval_hours(0.0)
    assert due != pytest.approx(CheckpointIntervals(default_gce_model(), 0.1).interval_hours(0.0), rel=1e-3)
    assert job.next_checkpoint_hours == pytest.approx(due, rel=1e-12)


def test_a_node_released_before_its_launch_is_confirmed_is_terminated_on_arrival(world: World) -> None:
    """The HP gang's launch is durable, then the job is cancelled before the fleet is called:
    the two instances the launch makes are terminated at once, each with its node's event."""
    hp = world.job("hp", kind="hp", workers=2)
    hp.state = JobState.QUEUED
    _place(world).run(60.0)
    Persist(world.store, world.settings, world.state, None).intents(60.0, {})
    nodes = [world.state.nodes[i] for i in hp.node_ids]
    world.ops.release(hp, 60.0, "job cancelled", keep=False)
    assert [n.state for n in nodes] == [NodeState.TERMINATING] * 2
    Act(world.fleet, world.store, world.state, world.rec, world.ops).run(60.0)
    assert sorted(world.fleet.instances) == sorted(n.instance_id or "" for n in nodes)
    assert {i.state for i in world.fleet.instances.values()} == {InstanceState.TERMINATED}
    causes = [e.cause for e in world.state.work.events if e.kind == "node" and e.cause.startswith("terminated")]
    assert causes == [f"terminated {n.instance_id} (released before launch)" for n in nodes]


# -- the unit of work: what changed is saved, nothing marks it by hand ---------------------------
def test_any_assigned_field_is_saved_at_the_tick_and_progress_on_its_schedule(world: World) -> None:
    """A field a phase assigns (here the message, as no phase records it) reaches the store at
    the tick's commit; a progress-only change waits for the job's turn, and is saved then."""
    world.settings.persist_progress_every = 1_000_000
    world.state.ticks = 1
    changed, moved = world.job("changed"), world.job("moved")
    for job in (changed, moved):
        job.mark_saved()  # as loaded from the store
    changed.message = "waiting: a reason no phase records"
    moved.progress_hours, moved.accounted_at = 0.5, 1800.0
    persist = Persist(world.store, world.settings, world.state, None)
    persist.intents(1800.0, {})
    persist.results(1800.0)
    assert world.store.get_job(changed.id).message == "waiting: a reason no phase records"
    assert not changed.assigned
    assert world.store.get_job(moved.id).progress_hours == 0.0  # not its turn
    assert moved.assigned == {"progress_hours", "accounted_at"}
    persist.results(1800.0, flush=True)
    assert world.store.get_job(moved.id).progress_hours == 0.5 and not moved.assigned


def test_an_executor_report_is_saved_the_same_tick(world: World) -> None:
    """What the workload cluster measured is saved at once, though only progress moved."""
    world.settings.persist_progress_every = 1_000_000
    world.state.ticks = 1
    job = world.job("real", entrypoint="python train.py")
    job.state = JobState.RUNNING
    job.mark_saved()
    AdvanceJobs(world.state, world.rec, world.ops, None, world.clock)._apply_report(
        job, ExecutorReport(progress_hours=0.25, checkpointed_hours=0.2, checkpoints=1), 900.0)
    Persist(world.store, world.settings, world.state, None).results(900.0)
    stored = world.store.get_job(job.id)
    assert (stored.progress_hours, stored.checkpointed_hours, stored.checkpoints) == (0.25, 0.2, 1)
    assert not job.assigned and job.id not in world.state.work.save_now


def test_a_failed_commit_keeps_the_changes_for_the_next_one(world: World,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    node = world.node(None, NodeState.READY)
    node.mark_saved()
    node.idle_since = 300.0
    persist = Persist(world.store, world.settings, world.state, None)

    def refused(**_: object) -> None:
        raise RuntimeError("the store is away")

    with monkeypatch.context() as m:
        m.setattr(world.store, "commit", refused)
        with pytest.raises(RuntimeError):
            persist.results(300.0)
    assert node.assigned == {"idle_since"}
    persist.results(360.0)
    assert not node.assigned
    (stored,) = [n for n in world.store.load_nodes(live_only=True)[0] if n.id == node.id]
    assert stored.idle_since == 300.0
