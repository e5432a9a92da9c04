"""The reconcile loop's state (:class:`LoopState`) and what one tick accumulates (:class:`TickWork`).

Every phase reads and writes one ``LoopState``: the controller's in-memory view of active jobs
and live nodes, tenants, the fleet's offers and spot availability, and the caches the loop
keeps between ticks. ``LoopState.work`` is the current tick's :class:`TickWork`, replaced at
the start of every tick (and of ``recover``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clusters.fleet import LaunchRequest, Offer
from controlplane.core.models import Decision, Event, Job, JobState, Node, NodeState, Tenant
from controlplane.store import BadRow, Intent
from policies.checkpoint import CheckpointIntervals
from policies.preemption import PreemptionModel
from policies.zones import ZoneEvidence, open_offers

#: The fields a job's progress and billing move every tick. A job whose only assigned fields are
#: these is saved every ``persist_progress_every``-th tick (accounting restarts from the stored
#: ``accounted_at``/``billed_at``, so nothing is lost); any other assignment is saved this tick.
PROGRESS_FIELDS = frozenset({
    "accounted_at", "billed_at", "cost", "gpu_hours", "on_demand_cost", "progress_hours",
    "checkpointed_hours", "checkpoint_left_hours", "next_checkpoint_hours",
    "changeover_left_hours", "checkpoints", "bill"})
UP_STATES = frozenset({NodeState.READY, NodeState.NOTICED})
WITH_NODES = frozenset({JobState.STARTING, JobState.RUNNING, JobState.CHECKPOINTING})


@dataclass
class TickReport:
    at: float
    ms: float
    jobs: int
    nodes: int
    launched: int = 0
    terminated: int = 0
    preempted: int = 0
    finished: int = 0


@dataclass
class TickWork:
    """What one tick accumulates before it persists."""

    events: list[Event] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    # jobs whose progress is saved this tick even when nothing else changed (an executor's
    # report: what the workload cluster measured is not recomputed after a restart)
    save_now: set[str] = field(default_factory=set)
    intents: list[Intent] = field(default_factory=list)
    launches: list[tuple[Intent, LaunchRequest, list[str]]] = field(default_factory=list)
    terminations: list[tuple[Intent, list[str]]] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=dict)
    notices: dict[str, float] = field(default_factory=dict)  # node id -> seconds left
    quarantine: list[BadRow] = field(default_factory=list)  # rows set aside this tick
    report: TickReport | None = None

    def count(self, name: str, by: float = 1.0) -> None:
        self.counters[name] = self.counters.get(name, 0.0) + by


@dataclass
class FleetKnowledge:
    """What the loop has learnt of the fleet beyond its nodes: spot availability per zone, recent
    preemptions and refusals, the evidence a policy sees, probes asked for, agents' notices."""

    availability: dict[str, bool] = field(default_factory=dict)  # zone -> spot available
    zone_preemptions: dict[str, list[float]] = field(default_factory=dict)  # zone -> times
    refused: dict[str, float] = field(default_factory=dict)  # zone -> last refused spot launch
    evidence: dict[str, bool] = field(default_factory=dict)  # zone -> spot up, as last seen
    probes: set[str] = field(default_factory=set)  # zones a policy asked to probe next tick
    external: dict[str, float] = field(default_factory=dict)  # instance id -> s left (agents)
    closed: frozenset[str] = frozenset()  # zones that take no new work (their cluster's gate)

    def zone_evidence(self) -> ZoneEvidence:
        """What the loop knows of every zone's spot capacity now, for zone ranking."""
        return ZoneEvidence(self.availability, self.refused, self.zone_preemptions)


@dataclass
class Admission:
    """Restart and admission bookkeeping: which stored jobs are back in memory, which rows were
    set aside, and why tenants' waiting jobs stayed PENDING."""

    bad_tenants: set[str] = field(default_factory=set)  # rows that do not load: not placed
    quarantined: set[tuple[str, str]] = field(default_factory=set)  # (table, id) set aside
    # tenant id -> seq of the last of its stored QUEUED jobs re-read since a restart (a tenant
    # is dropped once all are back in memory; see reconcile.ingest)
    parked: dict[str, int] = field(default_factory=dict)
    seqs: dict[str, int] = field(default_factory=dict)  # job id -> its store seq, once admitted
    # tenant id -> why its waiting jobs stayed PENDING in the last admission (policies.admission)
    held_back: dict[str, str] = field(default_factory=dict)


@dataclass
class Caches:
    """What the loop derives once and keeps: offers by job shape, quotas, checkpoint planners,
    spot lifetime models by cloud."""

    offers: dict[tuple[str | None, int], list[Offer]] = field(default_factory=dict)
    quotas: dict[str, float | None] = field(default_factory=dict)
    planners: dict[tuple[float, float], CheckpointIntervals] = field(
        default_factory=dict)  # by (checkpoint hours, node age bucket)
    lifetime_models: dict[str, PreemptionModel] = field(default_factory=dict)  # cloud -> model


@dataclass
class LoopState:
    """What the reconcile loop knows between ticks: the domain it holds in memory (offers, active
    jobs, live nodes, tenants), three parts (fleet knowledge, admission bookkeeping, caches), the
    hot spares, and the current tick's work."""

    offers: list[Offer]  # the fleet's zones and instance types, with prices
    jobs: dict[str, Job] = field(default_factory=dict)  # active jobs admitted (not PENDING)
    nodes: dict[str, Node] = field(default_factory=dict)  # live nodes
    by_instance: dict[str, str] = field(default_factory=dict)  # instance id -> node id
    tenants: dict[str, Tenant] = field(default_factory=dict)
    fleet: FleetKnowledge = field(default_factory=FleetKnowledge)
    admission: Admission = field(default_factory=Admission)
    caches: Caches = field(default_factory=Caches)
    spares: set[str] = field(default_factory=set)  # idle nodes kept as hot spares
    ticks: int = 0
    work: TickWork = field(default_factory=TickWork)
    spend: dict[str, float] | None = None  # tenant id -> dollars spent in spend_month (None: unread)
    spend_month: str = ""

    def offers_for(self, job: Job) -> list[Offer]:
        """The offers whose accelerator and GPUs per node fit the job (cached by shape)."""
        key = (job.spec.accelerator, job.spec.gpus_per_worker)
        hit = self.caches.offers.get(key)
        if hit is None:
            acc = job.spec.accelerator
            hit = [o for o in self.offers if (acc is None or o.accelerator.lower() == acc.lower())
                   and o.accelerator_count >= job.spec.gpus_per_worker]
            self.caches.offers[key] = hit
        return hit

    def open_offers_for(self, job: Job) -> list[Offer]:
        """The job's offers in the zones that take new work: every placement's candidates."""
        return open_offers(self.offers_for(job), self.fleet.closed)
