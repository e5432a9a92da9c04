"""Section 5 of the reconcile loop: place queued jobs, launch and terminate nodes.

Queued jobs (HP, then deadline, then spot) are placed on per-accelerator pool snapshots with
the spot quota and tenant limits; idle nodes are reaped and per-tenant demand is accounted.
"""

from __future__ import annotations

from clusters.fleet import LaunchRequest, Offer
from clusters.fleet import Market as FleetMarket
from controlplane import metrics
from controlplane.models import Job, JobKind, JobState, Market, Node, NodeState, new_id
from controlplane.pool import BUSY_STATES, PlacementPlan, Pool, plan, pools_of
from controlplane.reconcile_base import WITH_NODES, ReconcileState
from controlplane.store import Intent
from controlplane.units import HOUR

_KIND_ORDER = {JobKind.HP: 0, JobKind.DEADLINE: 1, JobKind.SPOT: 2}


class PlacementMixin(ReconcileState):
    """Placement: zones, markets, pools, plans, launches, terminations, idle nodes, demand."""

    def _store_quota(self, accelerator: str) -> float | None:
        if self.ticks % 10 == 0 or accelerator not in self._quota_cache:
            self._quota_cache = {q.accelerator: float(q.spot_quota_gpus)
                                 for q in self.store.quotas()}
        return self._quota_cache.get(accelerator)

    def _zones(self, job: Job, market: Market, now: float) -> list[Offer]:
        offers = self._offers_for(job)
        if job.kind is JobKind.DEADLINE and job.policy_zone:
            offers = [o for o in offers if o.zone == job.policy_zone] or offers
        if market is Market.ON_DEMAND:
            return sorted(offers, key=lambda o: (o.on_demand_price, o.zone))
        horizon = now - self.settings.zone_memory_seconds
        ok = [o for o in offers if self.availability.get(o.zone, False)
              and self.refused.get(o.zone, -1e18) < now - self.settings.refused_seconds]

        def score(o: Offer) -> tuple[float, str]:
            recent = sum(1 for t in self.zone_preemptions.get(o.zone, ()) if t >= horizon)
            return (o.spot_price * (1 + self.settings.zone_penalty * recent), o.zone)

        return sorted(ok, key=score)

    def _market(self, job: Job) -> Market | None:
        if job.kind is JobKind.HP:
            return Market.ON_DEMAND
        if job.kind is JobKind.SPOT:
            return Market.SPOT
        if job.policy_action in (None, "idle"):
            return None
        return Market(job.policy_action)

    def _place(self, now: float) -> None:
        queue = sorted((j for j in self.jobs.values() if j.state is JobState.QUEUED),
                       key=lambda j: (_KIND_ORDER[j.kind], j.submitted_at))
        if not queue:
            return
        pools = pools_of(list(self.nodes.values()), self._capacity())
        for acc, pool in pools.items():
            q = self.quota(acc)
            per_node = max((o.accelerator_count for o in self.offers if o.accelerator == acc),
                           default=1)
            pool.spot_quota_nodes = None if q is None else q / per_node
        tenant_gpus = self._tenant_gpus()
        for job in queue[: self.settings.max_placements_per_tick]:
            if job.state is not JobState.QUEUED:
                continue  # a victim of an earlier placement this tick
            try:
                self._place_one(job, pools, tenant_gpus, now)
            except Exception as exc:  # noqa: BLE001 - one job must not stop the tick
                self._quarantine_job(job, now, f"placing it raised {exc!r}")

    def _place_one(self, job: Job, pools: dict[str, Pool], tenant_gpus: dict[str, int],
                   now: float) -> None:
        """Place one queued job (or say why it waits)."""
        if job.tenant_id in self._bad_tenants:
            self._wait(job, "its tenant's stored row does not load (quarantined)", now)
            return
        if not self._offers_for(job):
            self._move(job, JobState.FAILED, self._unplaceable(job), now)
            return
        market = self._market(job)
        if market is None:
            return
        offers = self._zones(job, market, now)
        if not offers:
            self._wait(job, f"no {market.value} zone for {job.spec.accelerator or 'any GPU'}",
                       now)
            return
        tenant = self.tenants.get(job.tenant_id)
        if tenant is not None and tenant_gpus.get(tenant.id, 0) + job.gpus > tenant.max_gpus:
            self._wait(job, f"tenant limit: {tenant.max_gpus} GPUs", now)
            return
        best = offers[0]
        pool = pools.setdefault(best.accelerator, Pool(best.accelerator,
                                                       self._capacity_of(best.accelerator)))
        p = plan(self.scheduler, pool, self.jobs, job, market, [o.zone for o in offers],
                 self.nodes, now)
        if p is None:
            self._wait(job, f"no room in the {best.accelerator} pool "
                       f"({len(pool.nodes)}/{pool.capacity} nodes"
                       + (f", spot quota {pool.spot_quota_nodes:.1f} nodes)"
                          if pool.spot_quota_nodes is not None else ")"), now)
            return
        self._apply_plan(job, p, best, market, pool, now)
        tenant_gpus[job.tenant_id] = tenant_gpus.get(job.tenant_id, 0) + job.gpus

    def _unplaceable(self, job: Job) -> str:
        shapes = sorted({f"{o.accelerator}x{o.accelerator_count}" for o in self.offers})
        return (f"no zone offers {job.spec.accelerator or 'a GPU'} with "
                f"{job.spec.gpus_per_worker} GPUs per worker; the fleet has {', '.join(shapes)}")

    def _capacity_of(self, acc: str) -> int:
        return self.settings.pool_nodes.get(acc, self.settings.default_pool_nodes)

    def _capacity(self) -> dict[str, int]:
        return {o.accelerator: self._capacity_of(o.accelerator) for o in self.offers}

    def _tenant_gpus(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for j in self.jobs.values():
            if j.state in WITH_NODES:
                out[j.tenant_id] = out.get(j.tenant_id, 0) + j.gpus
        return out

    def _wait(self, job: Job, why: str, now: float) -> None:
        if job.message != f"waiting: {why}":
            job.message = f"waiting: {why}"
            self._decide(job, "placement", "wait", why, now)
            self._w.jobs[job.id] = job

    def _apply_plan(self, job: Job, p: PlacementPlan, offer: Offer, market: Market, pool: Pool,
                    now: float) -> None:
        for victim_id in p.victims:
            victim = self.jobs.get(victim_id)
            if victim is None or victim.state not in WITH_NODES:
                continue
            if victim.state in (JobState.RUNNING, JobState.CHECKPOINTING):
                self._progress(victim, now)
            self._bill(victim, now)
            if victim.terminal:
                self._release(victim, now, "job finished", keep=True)
                continue
            cause = f"preempted by {job.kind.value} job {job.id} (placement {p.policy})"
            self._w.count("hp_evictions_total")
            metrics.count(self._w.counters, "evictions_total", cause=f"{job.kind.value}_placement",
                          **metrics.job_where(victim, self.nodes))
            self._decide(victim, p.policy, "preempt", cause, now)
            self._preempt(victim, now, [], cause)
        for node_id in p.replace:
            self._terminate(self.nodes[node_id], now, f"replaced for job {job.id}")
        reused = [self.nodes[i] for i in p.reuse]
        for n in reused:
            n.job_id, n.tenant_id, n.idle_since = job.id, job.tenant_id, None
            self._w.nodes[n.id] = n
        new = self._launch(job, offer, market, p.launch, now) if p.launch else []
        pool.nodes.extend(new)
        pool.commit(p, job, {i: n.id for i, n in zip(p.launch_slots, new, strict=True)}, now)
        job.node_ids = [n.id for n in reused] + [n.id for n in new]
        job.market, job.zone = market, (new[0].zone if new else reused[0].zone)
        job.attempts += 1
        metrics.count(self._w.counters, "placements_total", kind=job.kind.value,
                      **metrics.job_where(job, self.nodes))
        job.billed_at = job.accounted_at = now
        if job.kind is JobKind.SPOT:
            self._w.count("spot_placements_total")
        self._decide(job, p.policy, "place", f"{len(new)} new + {len(reused)} reused "
                     f"{offer.accelerator} nodes, {market.value} in {job.zone}"
                     + (f", evicting {', '.join(p.victims)}" if p.victims else ""), now, job.zone)
        self._move(job, JobState.STARTING, f"placed on {len(job.node_ids)} {market.value} "
                   f"node(s) in {job.zone}", now)

    def _launch(self, job: Job, offer: Offer, market: Market, count: int,
                now: float) -> list[Node]:
        intent = Intent(id=new_id("launch"), kind="launch", created_at=now, payload={})
        nodes = [Node(id=new_id("node"), provider=self.fleet.name, cloud=offer.cloud,
                      zone=offer.zone, instance_type=offer.instance_type,
                      accelerator=offer.accelerator, accelerator_count=offer.accelerator_count,
                      market=market,
                      price_per_hour=offer.spot_price if market is Market.SPOT
                      else offer.on_demand_price,
                      on_demand_price_per_hour=offer.on_demand_price, intent_id=intent.id,
                      job_id=job.id, tenant_id=job.tenant_id, requested_at=now)
                 for _ in range(count)]
        intent.payload = {"zone": offer.zone, "instance_type": offer.instance_type,
                          "market": market.value, "count": count, "job_id": job.id,
                          "node_ids": [n.id for n in nodes]}
        for n in nodes:
            self.nodes[n.id] = n
            self._w.nodes[n.id] = n
        req = LaunchRequest(intent.id, offer.zone, offer.instance_type, FleetMarket(market.value),
                            count, {"job_id": job.id, "tenant_id": job.tenant_id})
        self._w.intents.append(intent)
        self._w.launches.append((intent, req, [n.id for n in nodes]))
        return nodes

    def _terminate(self, node: Node, now: float, cause: str) -> None:
        if node.gone or node.state is NodeState.TERMINATING:
            return
        if node.idle_since is not None and node.job_id is None:
            self._w.count("idle_cost_dollars",
                          node.price_per_hour * max(0.0, now - node.idle_since) / HOUR)
        node.state = NodeState.TERMINATING
        node.ended_at = now
        self._node_event(node, cause, now)
        if node.instance_id is None:
            return  # its launch intent is still pending; the launch step cancels it
        intent = Intent(id=new_id("term"), kind="terminate", created_at=now,
                        payload={"instance_ids": [node.instance_id], "node_ids": [node.id]})
        self._w.intents.append(intent)
        self._w.terminations.append((intent, [node.instance_id]))

    def _reap_idle(self, now: float) -> None:
        for n in list(self.nodes.values()):
            if n.job_id is not None or n.state not in BUSY_STATES or n.state is NodeState.TERMINATING:
                continue
            idle = n.idle_since if n.idle_since is not None else now
            if n.state is not NodeState.READY or now - idle >= self.settings.idle_node_seconds:
                self._terminate(n, now, "idle")

    def _account_demand(self, now: float) -> None:
        """GPU-hours demanded per tenant this tick (hp vs spot), the forecaster's input."""
        dt = self.settings.tick_seconds / HOUR
        demand: dict[str, tuple[float, float]] = {}
        for j in self.jobs.values():
            if j.terminal:
                continue
            hp, sp = demand.get(j.tenant_id, (0.0, 0.0))
            if j.kind is JobKind.HP:
                hp += j.gpus * dt
            else:
                sp += j.gpus * dt
            demand[j.tenant_id] = (hp, sp)
        self._demand = demand
