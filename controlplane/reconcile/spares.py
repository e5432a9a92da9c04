"""Hot spares (seed 001, Sec. 4.2): how long an idle node is kept before it is terminated.

A spot VM that has survived its infant-mortality hours is in the stable middle of the bathtub:
the most reliable capacity there is. When its job ends it is kept idle for up to
``hot_spare_seconds`` while the reuse policy would still run a typical job on it
(:meth:`policies.reuse.ReuseByAge.keep_as_spare`); other idle nodes go after
``idle_node_seconds``. Spares are used first by the jobs they suit (the plugin's score), and
their idle cost is counted apart from job costs (``spare_idle_cost_dollars``).
"""

from __future__ import annotations

import math
import statistics
from collections import deque

from controlplane.core.errors import InvalidInput
from controlplane.core.models import Node
from controlplane.core.units import HOUR
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.pool import lifetime_key, node_age_hours
from controlplane.reconcile.state import LoopState
from policies.preemption import PreemptionModel
from policies.reuse import REUSE_MODES, ReuseByAge
from policies.zones import open_offers, rank_spot

DEFAULT_TYPICAL_JOB_HOURS = 1.0  # spares' yardstick when no job is active
SPARE_SLACK = 1.0  # spares kept beyond rate x saving (the first spare is always worth a try)
ARRIVAL_WINDOW_SECONDS = 4 * 3600.0  # the recent past the arrival rate is measured over


def reuse_plugin(settings: ControllerSettings, models: dict[str, PreemptionModel],
                 provision_hours: float) -> ReuseByAge:
    """The placement plugin of ``settings.reuse`` (a clear error for an unknown mode)."""
    mode = next((m for m in REUSE_MODES if m == settings.reuse), None)
    if mode is None:
        raise InvalidInput("reuse", f"unknown reuse mode {settings.reuse!r}",
                           fix=f"use one of {', '.join(REUSE_MODES)}")
    return ReuseByAge(models, provision_hours=provision_hours, mode=mode)


class HotSpares:
    """Which idle ready nodes are hot spares now: by age (``keep_as_spare``), at most as many as
    jobs are expected to arrive within ``hot_spare_seconds`` (the recent arrival rate), the
    best first (lowest expected completion time of a typical job)."""

    def __init__(self, settings: ControllerSettings, state: LoopState, plugin: ReuseByAge) -> None:
        self.settings, self.state, self.plugin = settings, state, plugin
        self._seen: set[str] = set()
        self._arrivals: deque[float] = deque()

    def typical_hours(self) -> float:
        """The median compute hours of the active jobs, what a job arriving next is expected to
        need (or the configured yardstick)."""
        if self.settings.typical_job_hours is not None:
            return self.settings.typical_job_hours
        hours = [j.spec.compute_hours for j in self.state.jobs.values() if not j.terminal]
        return statistics.median(hours) if hours else DEFAULT_TYPICAL_JOB_HOURS

    def arrival_rate(self, now: float) -> float:
        """Jobs per hour over the last ``ARRIVAL_WINDOW_SECONDS`` of submissions seen."""
        jobs = self.state.jobs
        for j in jobs.values():
            if j.id not in self._seen:
                self._seen.add(j.id)
                self._arrivals.append(j.submitted_at)
        self._seen &= jobs.keys()
        while self._arrivals and self._arrivals[0] < now - ARRIVAL_WINDOW_SECONDS:
            self._arrivals.popleft()
        return len(self._arrivals) / (ARRIVAL_WINDOW_SECONDS / HOUR)

    def fresh_price(self, node: Node, now: float) -> float | None:
        """The spot price per hour of the VM a launch of ``node``'s type would get now (the
        launch's own zone order, :func:`policies.zones.rank_spot`), or None where no zone would take one."""
        same = [o for o in open_offers(self.state.offers, self.state.fleet.closed)
                if o.instance_type == node.instance_type]
        best = rank_spot(same, self.state.fleet.zone_evidence(), self.settings.zone_rule(), now)
        return best[0].spot_price if best else None

    def priced_saving(self, node: Node, typical: float, now: float) -> float:
        """Dollars a typical job saves on ``node`` against a fresh VM now (+inf where no fresh
        VM can be had: the spare is the only capacity)."""
        return self._priced_saving(node, typical, now, self.fresh_price(node, now))

    def _priced_saving(self, node: Node, typical: float, now: float,
                       fresh: float | None) -> float:
        if fresh is None:
            return math.inf
        return self.plugin.spare_saving_dollars(lifetime_key(node), typical,
                                                node_age_hours(node, now), node.price_per_hour,
                                                fresh)

    def select(self, nodes: list[Node], now: float) -> set[str]:
        """The ids of the idle ready ``nodes`` kept as hot spares now (marked as spares once
        idle past ``idle_node_seconds``).

        By age: the VMs on which a typical job saves hours against a fresh VM, best first; the
        i-th is kept while the jobs ahead of it, (i - 1) / rate hours of arrivals, come within
        its saving (so a spare's idle cost stays below what its reuse saves), and at most
        1 + rate x ``hot_spare_seconds`` of them. With ``spare_prices``, a VM on which a typical
        job costs more dollars than on the fresh VM a launch would get now is none
        (:meth:`priced_saving` <= 0). A node in a zone that takes no new work is none.
        """
        closed = self.state.fleet.closed
        nodes = [n for n in nodes if n.zone not in closed]  # no new work goes there
        if self.settings.hot_spare_seconds <= 0 or self.plugin.mode == "never" or not nodes:
            return set()
        if self.plugin.mode == "always":
            keep = nodes
        else:
            typical, rate = self.typical_hours(), self.arrival_rate(now)
            saving = {n.id: self.plugin.spare_saving_hours(
                lifetime_key(n), typical, node_age_hours(n, now)) for n in nodes}
            if self.settings.spare_prices:
                fresh: dict[str, float | None] = {}  # one launch order per instance type
                for n in nodes:
                    if saving[n.id] <= 0:
                        continue
                    if n.instance_type not in fresh:
                        fresh[n.instance_type] = self.fresh_price(n, now)
                    if self._priced_saving(n, typical, now, fresh[n.instance_type]) <= 0:
                        saving[n.id] = 0.0
            order = {n.id: i for i, n in enumerate(nodes)}  # ties: the loop's node order
            ranked = sorted((n for n in nodes if saving[n.id] > 0),
                            key=lambda n: (-saving[n.id], order[n.id]))
            cap = rate * self.settings.hot_spare_seconds / HOUR
            keep = [n for i, n in enumerate(ranked, 1) if i <= rate * saving[n.id] + SPARE_SLACK and i <= cap + 1]
        for n in keep:
            if now - (n.idle_since if n.idle_since is not None else now) >= \
                    self.settings.idle_node_seconds:
                self.state.spares.add(n.id)
        return {n.id for n in keep}
