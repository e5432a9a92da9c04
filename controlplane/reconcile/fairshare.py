"""Fair share in the live placement: the pools' share lines, the borrowing gate and reclaim.

Each tick :class:`FairShare` takes a snapshot of every pool's tenants (weights and nominal GPUs
from the store, GPUs held and asked for from the loop's state) and asks the pure
:mod:`policies.fairshare` for their share lines. A spot job whose tenant would go above its
entitlement while another tenant of the pool waits under its own does not borrow; a job whose
tenant is under its entitlement and finds no room reclaims the GPUs lent to others: victims
are chosen purely (:func:`policies.fairshare.reclaim`), and issued by the placement phase.
The lines are written for ``/metrics`` and the dashboard every ``zones_every_ticks`` ticks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace

from controlplane.core import counters
from controlplane.core.models import Job, JobKind, JobState, TenantShare
from controlplane.core.units import HOUR
from controlplane.reconcile import workload
from controlplane.reconcile.contracts import JobExecutor
from controlplane.reconcile.nodeops import NodeOps, PreemptionReason
from controlplane.reconcile.pool import Pool
from controlplane.reconcile.recorder import Recorder
from controlplane.reconcile.state import WITH_NODES, LoopState
from controlplane.store import Store
from policies.fairshare import Candidate, ShareLine, TenantDemand, entitlements, reclaim

META_KEY = "fair_share"  # the store's meta row holding the last share lines, as JSON

Lines = dict[str, dict[str, ShareLine]]  # pool (accelerator) -> tenant id -> its line


class StoreShares:
    """The tenants' fair-share settings from the store, re-read every tenth tick."""

    def __init__(self, store: Store, state: LoopState) -> None:
        self.store, self.state = store, state
        self._shares: dict[str, TenantShare] | None = None

    def __call__(self) -> Mapping[str, TenantShare]:
        if self._shares is None or self.state.ticks % 10 == 0:
            self._shares = self.store.tenant_shares()
        return self._shares


class FairShare:
    """Share lines per pool for one tick, the borrowing gate and the reclaim victims."""

    def __init__(self, shares: Callable[[], Mapping[str, TenantShare]], state: LoopState,
                 store: Store | None = None, publish_every: int = 10) -> None:
        self.shares, self.state, self.store = shares, state, store
        self.publish_every = publish_every
        self.lines: Lines = {}
        self.per_node: dict[str, int] = {}

    # -- the snapshot --------------------------------------------------------------------------
    def refresh(self, pools: Mapping[str, Pool], now: float) -> Lines:
        """This tick's share lines of every pool (FS-1 to FS-3), published now and then."""
        s = self.state
        settings = self.shares()
        self.per_node = {acc: max((o.accelerator_count for o in s.offers if o.accelerator == acc),
                                  default=1) for acc in pools}
        held: dict[str, dict[str, float]] = {acc: {} for acc in pools}
        for acc, pool in pools.items():
            for n in pool.nodes:
                job = s.jobs.get(n.job_id) if n.job_id else None
                if job is not None:
                    held[acc][job.tenant_id] = held[acc].get(job.tenant_id, 0.0) + self.per_node[acc]
        waiting: dict[str, dict[str, float]] = {acc: {} for acc in pools}
        for job in s.jobs.values():
            target = self._pool_of(job, pools)
            if job.state is JobState.QUEUED and target is not None:
                w = waiting[target]
                w[job.tenant_id] = (w.get(job.tenant_id, 0.0)
                                    + job.nodes_needed * self.per_node[target])
        self.lines = {}
        for acc, pool in pools.items():
            tenants = sorted(set(held[acc]) | set(waiting[acc]) | set(s.tenants))
            demands = [self._demand(t, acc, settings, held[acc], waiting[acc]) for t in tenants]
            self.lines[acc] = entitlements(pool.capacity * self.per_node[acc], demands)
        return self.lines

    def _demand(self, tenant: str, acc: str, settings: Mapping[str, TenantShare],
                held: Mapping[str, float], waiting: Mapping[str, float]) -> TenantDemand:
        share = settings.get(tenant)
        nominal = None
        if share is not None:
            named = {k.lower(): v for k, v in share.nominal_gpus.items()}
            nominal = None if acc.lower() not in named else float(named[acc.lower()])
        return TenantDemand(tenant, float(share.weight) if share else 1.0, nominal,
                            held.get(tenant, 0.0), waiting.get(tenant, 0.0))

    @staticmethod
    def _pool_of(job: Job, pools: Mapping[str, Pool]) -> str | None:
        want = (job.spec.accelerator or "").lower()
        return next((acc for acc in pools if acc.lower() == want), None)

    def due(self) -> bool:
        """Whether this tick's lines are published (every ``publish_every`` ticks)."""
        return self.store is not None and self.state.ticks % self.publish_every == 0

    def publish(self, now: float) -> None:
        """Write the lines for ``/metrics`` and the dashboard."""
        if self.store is None:
            return
        body = {"at": now, "pools": {acc: {t: _line_json(line) for t, line in lines.items()}
                                     for acc, lines in self.lines.items()}}
        self.store.set_meta(META_KEY, json.dumps(body, sort_keys=True))

    def took(self, job: Job, acc: str) -> None:
        """``job`` was placed in pool ``acc``: its tenant holds its GPUs from now on."""
        line = self.lines.get(acc, {}).get(job.tenant_id)
        if line is not None:
            gpus = job.nodes_needed * self.per_node.get(acc, 1)
            self.lines[acc][job.tenant_id] = replace(line, held=line.held + gpus)

    def gave_back(self, job: Job, acc: str, gpus: float) -> None:
        """``job``, a reclaim's victim, gave back ``gpus`` of pool ``acc``."""
        line = self.lines.get(acc, {}).get(job.tenant_id)
        if line is not None:
            self.lines[acc][job.tenant_id] = replace(line, held=max(0.0, line.held - gpus))

    # -- decisions -----------------------------------------------------------------------------
    def gate(self, job: Job, acc: str) -> str:
        """Why a spot job may not borrow now ('' when it may): its tenant would pass its
        entitlement while another tenant of the pool waits under its own."""
        lines = self.lines.get(acc)
        line = lines.get(job.tenant_id) if lines else None
        if job.kind is not JobKind.SPOT or lines is None or line is None:
            return ""
        gpus = job.nodes_needed * self.per_node.get(acc, 1)
        if line.held + gpus <= line.entitled + 1e-9 or line.held < line.entitled - 1e-9:
            return ""
        owed = [t for t, other in lines.items() if t != job.tenant_id and other.room > 1e-9]
        if not owed:
            return ""
        return (f"fair share: the tenant holds {line.held:g} of its {line.entitled:.1f} "
                f"{acc} GPUs while {len(owed)} other tenant(s) wait under theirs")

    def victims(self, job: Job, acc: str, need_nodes: int,
                busy: Collection[str] = ()) -> tuple[str, ...]:
        """Spot jobs of tenants over their share whose eviction frees ``need_nodes`` nodes for
        ``job``, whose tenant is under its entitlement (FS-4), none of ``busy``; () otherwise."""
        lines = self.lines.get(acc)
        line = lines.get(job.tenant_id) if lines else None
        per_node = self.per_node.get(acc, 1)
        if lines is None or line is None or line.held >= line.entitled - 1e-9:
            return ()
        cands = [Candidate(j.id, j.tenant_id, len(j.node_ids) * per_node,
                           max(0.0, j.progress_hours - j.checkpointed_hours))
                 for j in self.state.jobs.values()
                 if j.kind is JobKind.SPOT and j.state in WITH_NODES and j.node_ids
                 and j.id not in busy and (j.spec.accelerator or "").lower() == acc.lower()]
        return reclaim(lines, job.tenant_id, need_nodes * per_node, cands,
                       asking=job.nodes_needed * per_node)


@dataclass(frozen=True)
class Drain:
    """A reclaim's victim writing its checkpoint before it gives its nodes back."""

    claimant: str  # the tenant the nodes go to
    pool: str
    until: float  # give them back by then, checkpoint written or not
    cause: str


class Reclaimer:
    """Issues fair share's reclaims. A victim checkpoints first where it can (a simulated job
    writes one; a real job's checkpoint actor is told, as at a preemption notice) and gives its
    ready nodes back once written, within its checkpoint time plus a tick; the claimant reuses
    them in that tick. A victim that cannot checkpoint gives them back at once."""

    def __init__(self, fair: FairShare, state: LoopState, rec: Recorder, ops: NodeOps,
                 executor: JobExecutor | None, tick_seconds: float) -> None:
        self.fair, self.state, self.rec, self.ops = fair, state, rec, ops
        self.executor, self.tick_seconds = executor, tick_seconds
        self.draining: dict[str, Drain] = {}

    def finish(self, pools: Mapping[str, Pool], now: float) -> None:
        """Victims whose checkpoint is written (or whose time is up) give their nodes back."""
        for job_id, d in list(self.draining.items()):
            victim = self.state.jobs.get(job_id)
            if victim is None or victim.state not in WITH_NODES:
                del self.draining[job_id]
                continue
            writing = victim.state is JobState.CHECKPOINTING or victim.spec.entrypoint is not None
            if writing and now < d.until:
                continue
            del self.draining[job_id]
            self._evict(victim, d.pool, d.cause, now)
            if d.pool in pools:
                pools[d.pool].add([])  # its snapshot is rebuilt with the victim's nodes idle

    def start(self, job: Job, pool: Pool, now: float) -> bool:
        """Reclaim GPUs for ``job``: True when nodes were freed now (plan again); its tenant's
        earlier victims still checkpointing make it wait for them."""
        acc = pool.accelerator
        if any(d.claimant == job.tenant_id and d.pool == acc for d in self.draining.values()):
            return False
        freed = False
        for victim_id in self.fair.victims(job, acc, job.nodes_needed, busy=self.draining):
            victim = self.state.jobs.get(victim_id)
            if victim is None or victim.state not in WITH_NODES:
                continue
            if victim.state in (JobState.RUNNING, JobState.CHECKPOINTING):
                self.rec.progress(victim, now)
            lose = max(0.0, victim.progress_hours - victim.checkpointed_hours)
            cause = (f"reclaimed for tenant {job.tenant_id}'s fair share by job {job.id} "
                     f"({lose:.3f} h since its checkpoint)")
            self.rec.decide(victim, "fairshare", "preempt", cause, now)
            until = self._checkpoint_first(victim, cause, now)
            if until is not None:
                self.draining[victim.id] = Drain(job.tenant_id, acc, until, cause)
            else:
                self._evict(victim, acc, cause, now)
                freed = True
        if freed:
            pool.add([])
        return freed

    def _checkpoint_first(self, victim: Job, cause: str, now: float) -> float | None:
        """Ask the victim to checkpoint now; by when it gives its nodes back (None: at once)."""
        if victim.terminal or victim.state is JobState.STARTING:
            return None
        write_s = victim.spec.checkpoint_hours * HOUR
        if victim.spec.entrypoint is not None:
            if self.executor is None or write_s <= 0:
                return None
            self.executor.notice(victim, write_s)
            return now + write_s + self.tick_seconds
        if victim.state is JobState.RUNNING and not workload.begin_checkpoint(
                victim, self.rec.move, f"checkpoint before a reclaim: {cause}", now):
            return None
        if victim.state is not JobState.CHECKPOINTING:
            return None  # written at once (no checkpoint cost)
        return now + victim.checkpoint_left_hours * HOUR + self.tick_seconds

    def _evict(self, victim: Job, acc: str, cause: str, now: float) -> None:
        """Give the victim's nodes back (ready ones stay idle, for the claimant to reuse)."""
        s, w = self.state, self.state.work
        if victim.state in (JobState.RUNNING, JobState.CHECKPOINTING):
            self.rec.progress(victim, now)
        self.rec.bill(victim, now)
        if victim.terminal:
            self.ops.release(victim, now, "job finished", keep=True)
            return
        held = len(victim.node_ids) * self.fair.per_node.get(acc, 1)
        counters.count(w.counters, "evictions_total", cause="fair_share",
                       **counters.job_where(victim, s.nodes))
        w.count("fair_share_reclaims_total")
        self.ops.preempt(victim, now, [], cause, PreemptionReason.EVICTION, keep=True)
        self.fair.gave_back(victim, acc, held)


def _line_json(line: ShareLine) -> dict[str, float]:
    return {"weight": line.weight, "nominal_gpus": line.nominal, "entitled_gpus": line.entitled,
            "held_gpus": line.held, "borrowed_gpus": line.borrowed, "lent_gpus": line.lent}


def read_lines(raw: str | None) -> dict[str, dict[str, dict[str, float]]]:
    """The published share lines (pool -> tenant id -> line fields), {} when none were."""
    if not raw:
        return {}
    try:
        pools = json.loads(raw).get("pools", {})
    except (ValueError, AttributeError):
        return {}
    return pools if isinstance(pools, dict) else {}


__all__ = ["META_KEY", "Drain", "FairShare", "Reclaimer", "StoreShares", "read_lines"]
