"""What the reconcile loop is configured with and the executor it talks to."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, cast, runtime_checkable

from controlplane.core.models import Job, Node
from controlplane.core.units import HOUR
from policies.zones import ZONE_OBSERVATIONS, ZoneRule

__all__ = ["ZONE_OBSERVATIONS", "ControllerSettings", "ExecutorReport", "JobExecutor",
           "QuotaSource", "ReplicatingExecutor", "replicating"]


@dataclass
class ControllerSettings:
    """Knobs of the reconcile loop (times in control-plane seconds)."""

    tick_seconds: float = 60.0
    pool_nodes: dict[str, int] = field(default_factory=lambda: {"V100": 48, "H100": 12})
    default_pool_nodes: int = 16
    scheduler: str = "gfs"
    # a deadline job's policy when its spec names none; None: the best measured multi-zone
    # policy where the job's offers span several zones, Uniform Progress where they do not
    deadline_policy: str | None = None
    idle_node_seconds: float = 120.0
    # VM reuse (seed 001 Sec. 4.2): 'by_age' asks policies.reuse.ReuseByAge, 'always' reuses any
    # idle node, 'never' launches a fresh VM for every job
    reuse: str = "by_age"
    # an idle node past infant mortality whose remaining life still covers typical jobs is kept
    # this long as a hot spare (by_age; 'always' keeps every idle node this long; 0: no spares)
    hot_spare_seconds: float = 3600.0
    # priced spares (by_age): an idle node is no spare while a typical job costs more on it than
    # on the fresh VM a launch would get now (policies.reuse.ReuseByAge.spare_saving_dollars)
    spare_prices: bool = False
    typical_job_hours: float | None = None  # None: the median expected hours of active jobs
    max_placements_per_tick: int = 64
    # Bounded admission: at most ``ingest_batch`` stored jobs (new submissions, and queued jobs
    # re-read after a restart) enter the in-memory queues per tick, shared among tenants; a
    # tenant holds at most ``queued_per_tenant`` queued jobs there and all tenants together at
    # most ``queued_total``, shared fairly between the tenants with work (policies.admission:
    # tenants over their share hand queued jobs back for one under it); the rest wait in the
    # store (oldest first), so a tick's work is bounded by these knobs, not the backlog.
    ingest_batch: int = 1000
    queued_per_tenant: int = 1000
    queued_total: int = 1000
    provision_hours: float = 200.0 / HOUR  # worst provisioning delay, added to the policy's d
    zone_penalty: float = 0.25  # spot price multiplier per recent preemption in a zone
    zone_memory_seconds: float = 3 * HOUR
    refused_seconds: float = 600.0  # skip a zone this long after it refused a spot launch
    zones_every_ticks: int = 10  # how often the zone snapshot is written for the API
    # how often the fleet's offers (zones, instance types, prices) are read again: the zones of a
    # workload cluster registered since, a cloud's new spot prices
    catalog_every_ticks: int = 60
    # How the controller knows a zone's spot availability. 'free': the provider's view of every
    # zone (the simulated fleet's truth; a real cloud probed zone by zone every zones_every_ticks
    # ticks). 'evidence': only from where nodes run or were preempted, launches it tried (a
    # refusal says down) and the probes a policy asks for (billed probe_minutes of spot each);
    # a zone never seen is believed up, so a launch tries it (policies.paid_observation).
    zone_observation: str = "free"
    probe_minutes: float = 1.0
    # A job whose only change is progress/cost is written every n-th tick (a tenth of them per
    # tick): accounting restarts from the stored accounted_at/billed_at, so nothing is lost.
    persist_progress_every: int = 10
    seed: int = 0
    # Fair share between tenants (policies.fairshare): weights and nominal GPUs per pool, idle
    # share lent to busy tenants and reclaimed from them, least lost work first; False: GFS alone
    fair_share: bool = True

    def zone_rule(self) -> ZoneRule:
        """How spot zones are ranked (:func:`policies.zones.rank_spot`)."""
        return ZoneRule(observation=cast("Literal['free', 'evidence']", self.zone_observation),
                        penalty=self.zone_penalty, memory_s=self.zone_memory_seconds,
                        refused_s=self.refused_seconds)


@dataclass
class ExecutorReport:
    """What a real executor reports for one job each tick."""

    progress_hours: float
    checkpointed_hours: float
    checkpoints: int = 0
    finished: bool = False
    failed: str | None = None
    checkpoint_bytes: int = 0  # the job's checkpoints so far, in bytes (cumulative)
    restore_fallbacks: int = 0  # the job's restores that skipped a bad checkpoint (cumulative)
    exit_code: int | None = None  # a failed attempt's exit code, when the executor learnt it


class JobExecutor(Protocol):
    """Runs jobs with an ``entrypoint`` on their nodes; simulated jobs need none."""

    def start(self, job: Job, nodes: Sequence[Node]) -> None: ...

    def stop(self, job: Job, reason: str) -> None: ...

    def notice(self, job: Job, seconds_left: float) -> None: ...

    def poll(self, jobs: Sequence[Job]) -> dict[str, ExecutorReport]: ...


QuotaSource = Callable[[str], float | None]  # accelerator -> spot quota in GPUs (None = none)


@runtime_checkable
class ReplicatingExecutor(Protocol):
    """Replica bookkeeping the loop calls when a node of a replicated job is lost or replaced."""

    def node_preempted(self, job: Job, node_id: str, reason: str = "node preempted") -> bool:
        """The replica on ``node_id`` is gone; True when another replica of ``job`` survives."""
        ...

    def start_replacement(self, job: Job, node: Node) -> object:
        """Start a replica on the replacement ``node``, restoring from a survivor's checkpoint."""
        ...


def replicating(executor: object) -> ReplicatingExecutor:
    """``executor`` as a :class:`ReplicatingExecutor`; the caller has checked that it is one."""
    if not isinstance(executor, ReplicatingExecutor):
        raise TypeError(f"{type(executor).__name__} does not replicate jobs")
    return executor
