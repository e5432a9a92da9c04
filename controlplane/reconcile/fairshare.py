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
from collections.abc import Callable, Mapping
from dataclasses import replace

from controlplane.core.models import Job, JobKind, JobState, TenantShare
from controlplane.reconcile.pool import Pool
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

    def victims(self, job: Job, acc: str, need_nodes: int) -> tuple[str, ...]:
        """Spot jobs of tenants over their share whose eviction frees ``need_nodes`` nodes for
        ``job``, whose tenant is under its entitlement (FS-4); () otherwise."""
        lines = self.lines.get(acc)
        line = lines.get(job.tenant_id) if lines else None
        per_node = self.per_node.get(acc, 1)
        if lines is None or line is None or line.held >= line.entitled - 1e-9:
            return ()
        cands = [Candidate(j.id, j.tenant_id, len(j.node_ids) * per_node,
                           max(0.0, j.progress_hours - j.checkpointed_hours))
                 for j in self.state.jobs.values()
                 if j.kind is JobKind.SPOT and j.state in WITH_NODES and j.node_ids
                 and (j.spec.accelerator or "").lower() == acc.lower()]
        return reclaim(lines, job.tenant_id, need_nodes * per_node, cands,
                       asking=job.nodes_needed * per_node)


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


__all__ = ["META_KEY", "FairShare", "StoreShares", "read_lines"]
