"""Hot spares (seed 001, Sec. 4.2): how long an idle node is kept before it is terminated.

A spot VM that has survived its infant-mortality hours is in the stable middle of the bathtub:
the most reliable capacity there is. When its job ends it is kept idle for up to
``hot_spare_seconds`` while the reuse policy would still run a typical job on it
(:meth:`policies.reuse.ReuseByAge.keep_as_spare`); other idle nodes go after
``idle_node_seconds``. Spares are used first by the jobs they suit (the plugin's score), and
their idle cost is counted apart from job costs (``spare_idle_cost_dollars``).
"""

from __future__ import annotations

import statistics

from clusters.fleet import FleetProvider
from controlplane.core.errors import InvalidInput
from controlplane.core.models import Node, NodeState
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.pool import expected_hours, lifetime_key, node_age_hours
from controlplane.reconcile.state import LoopState
from policies.preemption import PreemptionModel, default_gce_model
from policies.reuse import REUSE_MODES, ReuseByAge

DEFAULT_TYPICAL_JOB_HOURS = 1.0  # spares' yardstick when no job is active


def lifetime_models(fleet: FleetProvider) -> dict[str, PreemptionModel]:
    """Lifetime models by cloud: GCP's fitted bathtub (the fleet's, else seed 001's GCE fit);
    every other cloud is memoryless (no model: a VM's age does not matter)."""
    model = fleet.lifetimes
    return {"gcp": model if isinstance(model, PreemptionModel) else default_gce_model()}


def reuse_plugin(settings: ControllerSettings, models: dict[str, PreemptionModel],
                 provision_hours: float) -> ReuseByAge:
    """The placement plugin of ``settings.reuse`` (a clear error for an unknown mode)."""
    mode = next((m for m in REUSE_MODES if m == settings.reuse), None)
    if mode is None:
        raise InvalidInput("reuse", f"unknown reuse mode {settings.reuse!r}",
                           fix=f"use one of {', '.join(REUSE_MODES)}")
    return ReuseByAge(models, provision_hours=provision_hours, mode=mode)


class HotSpares:
    """Per idle node: how long it may stay idle, and whether it is a hot spare now."""

    def __init__(self, settings: ControllerSettings, state: LoopState, plugin: ReuseByAge) -> None:
        self.settings, self.state, self.plugin = settings, state, plugin

    def typical_hours(self) -> float:
        """The median expected hours of the active jobs (or the configured yardstick)."""
        if self.settings.typical_job_hours is not None:
            return self.settings.typical_job_hours
        hours = [expected_hours(j) for j in self.state.jobs.values() if not j.terminal]
        return statistics.median(hours) if hours else DEFAULT_TYPICAL_JOB_HOURS

    def is_spare(self, node: Node, now: float, typical_hours: float) -> bool:
        if node.state is not NodeState.READY or self.settings.hot_spare_seconds <= 0:
            return False
        if self.plugin.mode == "always":
            return True
        return self.plugin.keep_as_spare(lifetime_key(node), node_age_hours(node, now),
                                         typical_hours)

    def keep_seconds(self, node: Node, now: float, typical_hours: float) -> float:
        """Seconds the idle node may stay idle; marks it a spare once past the short wait."""
        short = self.settings.idle_node_seconds
        idle = now - (node.idle_since if node.idle_since is not None else now)
        if not self.is_spare(node, now, typical_hours):
            return short
        if idle >= short:
            self.state.spares.add(node.id)
        return max(short, self.settings.hot_spare_seconds)
