"""Billing: each node's price for the time it served the job, split into the bill's lines
(``controlplane.core.bills``), the on-demand counterfactual, and each tenant's spend this
month (the ``tenant_month_spend_dollars_total`` counter and ``LoopState.spend``)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from controlplane.core import bills, counters
from controlplane.core.models import Job, Market
from controlplane.core.units import HOUR
from controlplane.reconcile.state import LoopState
from policies.budgets import month_of


class Billing:
    """Charges jobs for their nodes' time (provisioning included), line by line."""

    def __init__(self, state: LoopState) -> None:
        self.state = state

    def bill(self, job: Job, until: float) -> None:
        """Charge the job for its nodes' time since it was last billed (provisioning included):
        cost = sum over nodes of price x (min(until, end) - max(billed_at, launched)) / HOUR,
        split into provisioning (before the gang's last node was ready, and after the job
        finished until its nodes were let go), changeover and checkpoint (the
        wall hours the workload spent in them, not yet billed) and compute by market."""
        start = job.billed_at if job.billed_at is not None else until
        if until <= start:
            job.billed_at = max(start, until)
            return
        wall = (until - start) / HOUR
        b = job.bill
        changeover = min(wall, b.get("changeover_hours", 0.0) - b.get("changeover_billed_hours", 0.0))
        changeover = max(0.0, changeover)
        checkpoint = max(0.0, min(wall - changeover, b.get("checkpoint_hours", 0.0)
                                  - b.get("checkpoint_billed_hours", 0.0)))
        lines: dict[str, float] = {"changeover_billed_hours": changeover,
                                   "checkpoint_billed_hours": checkpoint}
        cost = gpu_h = 0.0
        gang = [self.state.nodes[i] for i in job.node_ids if i in self.state.nodes]
        gang_ready = max((n.ready_at if n.ready_at is not None else until for n in gang),
                         default=until)  # the job runs once its last worker is ready
        for node_id in job.node_ids:
            n = self.state.nodes.get(node_id)
            if n is None or n.launched_at is None:
                continue
            a = max(start, n.launched_at)
            e = min(until, n.ended_at if n.ended_at is not None else until)
            if e <= a:
                continue
            ready = min(max(gang_ready, a), e)
            done = e if job.finished_at is None else min(max(job.finished_at, ready), e)
            served = (done - ready) / HOUR  # the job ran on it (changeover and checkpoints too)
            co = min(changeover, served)
            ck = min(checkpoint, served - co)
            price = bills.node_price(n)
            market = "spot" if n.market is Market.SPOT else "on_demand"
            _add(lines, "provisioning", price * ((ready - a) + (e - done)) / HOUR)
            _add(lines, "changeover", price * co)
            _add(lines, "checkpoint", price * ck)
            _add(lines, f"{market}_compute", price * (served - co - ck))
            _add(lines, f"{market}_gpu_hours", n.accelerator_count * (e - a) / HOUR)
            cost += price * (e - a) / HOUR
            gpu_h += n.accelerator_count * (e - a) / HOUR
        egress = job.egress_cost - job.bill.get("egress_counted", 0.0)  # written elsewhere
        if egress > 0:
            lines["egress_counted"] = egress
        bills.add(job, lines)
        job.cost += cost
        job.gpu_hours += gpu_h
        job.billed_at = until
        self.spent(job.tenant_id, cost + max(0.0, egress), until)
        od = self._od_price(job)
        job.on_demand_cost = max(job.on_demand_cost, job.progress_hours * job.spec.workers * od)

    def lose(self, job: Job, hours: float) -> None:
        """A preemption lost ``hours`` of compute since the last checkpoint: their dollars at the
        price paid (the job's nodes' $/h) move from its market's compute line to ``lost_work``."""
        if hours <= 0:
            return
        rate = sum(bills.node_price(n) for i in job.node_ids
                   if (n := self.state.nodes.get(i)) is not None)
        line = "on_demand_compute" if job.market is Market.ON_DEMAND else "spot_compute"
        moved = min(hours * rate, job.bill.get(line, 0.0))
        bills.add(job, {line: -moved, "lost_work": moved, "lost_work_hours": hours})

    def charge(self, job: Job, line: str, dollars: float, now: float) -> None:
        """A cost apart from the job's node time (probes, a reused hot spare's idle time)."""
        if dollars <= 0:
            return
        bills.add(job, {line: dollars})
        self.spent(job.tenant_id, dollars, now)

    def spent(self, tenant_id: str, dollars: float, at: float) -> None:
        """Count ``dollars`` of the tenant's spend in the month of ``at`` (never a NaN)."""
        if not math.isfinite(dollars) or dollars <= 0:
            return
        s = self.state
        month = month_of(at)
        if s.spend is not None and s.spend_month == month:
            s.spend[tenant_id] = s.spend.get(tenant_id, 0.0) + dollars
        else:
            s.spend = None  # read again: the store's, plus this tick's counters
        counters.count(s.work.counters, "tenant_month_spend_dollars_total", dollars,
                       tenant=tenant_id, month=month)

    def _od_price(self, job: Job) -> float:
        prices = [o.on_demand_price for o in self.state.offers_for(job) if math.isfinite(o.on_demand_price)]
        return min(prices, default=0.0)


def _add(lines: dict[str, float], name: str, value: float) -> None:
    lines[name] = lines.get(name, 0.0) + value


def node_lines(bill: Mapping[str, float]) -> float:
    """The dollars of a bill's node-time lines (what ``Job.cost`` holds)."""
    return sum(bill.get(k, 0.0) for k in bills.NODE_LINES)
