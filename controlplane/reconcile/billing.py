"""Billing: each node's price for the time it served the job, and the on-demand counterfactual."""

from __future__ import annotations

from controlplane.core.models import Job
from controlplane.core.units import HOUR
from controlplane.reconcile.state import LoopState


class Billing:
    """Charges jobs for their nodes' time (provisioning included)."""

    def __init__(self, state: LoopState) -> None:
        self.state = state

    def bill(self, job: Job, until: float) -> None:
        """Charge the job for its nodes' time since it was last billed (provisioning included):
        cost = sum over nodes of price x (min(until, end) - max(billed_at, launched)) / HOUR."""
        start = job.billed_at if job.billed_at is not None else until
        if until <= start:
            job.billed_at = max(start, until)
            return
        cost = gpu_h = 0.0
        for node_id in job.node_ids:
            n = self.state.nodes.get(node_id)
            if n is None or n.launched_at is None:
                continue
            a = max(start, n.launched_at)
            b = min(until, n.ended_at if n.ended_at is not None else until)
            if b > a:
                cost += n.price_per_hour * (b - a) / HOUR
                gpu_h += n.accelerator_count * (b - a) / HOUR
        job.cost += cost
        job.gpu_hours += gpu_h
        job.billed_at = until
        od = self._od_price(job)
        job.on_demand_cost = max(job.on_demand_cost, job.progress_hours * job.spec.workers * od)

    def _od_price(self, job: Job) -> float:
        prices = [o.on_demand_price for o in self.state.offers_for(job)]
        return min(prices, default=0.0)
