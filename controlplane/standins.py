"""Stand-ins for policies that have not landed yet, behind the same interfaces.

Each ``load_*`` function returns the real policy when its module is importable and the stand-in
otherwise, so the control plane switches over without code changes. Stand-ins are simple but
honest (data-driven where they can be), never stubs that return what a test expects.
"""

from __future__ import annotations

import importlib
import logging
import math
from typing import Any, Protocol, runtime_checkable

import numpy as np

log = logging.getLogger(__name__)


class LifetimeModel(Protocol):
    """What the simulated fleet needs from the preemption model (hours)."""

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray: ...


@runtime_checkable
class SurvivalModel(LifetimeModel, Protocol):
    """A lifetime model with its survival function S(t): what the optimal checkpoint planner
    needs (``policies.preemption.PreemptionModel``; the empirical stand-in has none)."""

    def sf(self, t: np.ndarray) -> np.ndarray: ...


class EmpiricalLifetimes:
    """Stand-in for ``policies.preemption.default_gce_model()``: resample the preempted GCE VMs'
    lifetimes (gce-preemptions, 1,442 VMs), capped at 24 h like GCP preemptible VMs."""

    def __init__(self, hours: np.ndarray) -> None:
        h = np.asarray(hours, dtype=float)
        self.hours = np.clip(h[np.isfinite(h) & (h > 0)], 1e-3, 24.0)
        if self.hours.size == 0:
            self.hours = np.array([24.0])

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.asarray(rng.choice(self.hours, size=n), dtype=float)


def load_lifetime_model(data_root: Any = None) -> LifetimeModel:
    """``policies.preemption.default_gce_model()`` when it exists, else the empirical stand-in."""
    try:
        mod = importlib.import_module("policies.preemption")
        model: LifetimeModel = mod.default_gce_model()
        return model
    except (ModuleNotFoundError, AttributeError) as exc:
        log.info("preemption model not available (%s): empirical GCE lifetimes stand in", exc)
    from clusters.traces import DataCatalog
    from controlplane.config import data_dir

    life = DataCatalog(data_root or data_dir()).gce_lifetimes()
    return EmpiricalLifetimes(life.lifetime_hours[life.preempted])


class CheckpointPlanner(Protocol):
    def interval_hours(self, done_since_start_hours: float) -> float: ...


class YoungCheckpointPlanner:
    """Stand-in for ``policies.checkpoint.OptimalCheckpointPlanner``: Young's interval
    ``sqrt(2 * delta * MTTF)`` with the mean time to failure of the lifetime model."""

    def __init__(self, delta_hours: float, mttf_hours: float) -> None:
        self.delta = max(delta_hours, 1e-4)
        self.mttf = max(mttf_hours, 1e-3)

    def interval_hours(self, done_since_start_hours: float) -> float:
        return max(math.sqrt(2 * self.delta * self.mttf), 1e-3)


class ScheduleIntervals:
    """Intervals from one optimal schedule for a fresh VM (seed 001 Eq. 9-13), computed once
    per checkpoint cost: the next checkpoint after the work done since the VM started; past
    the planned horizon, the schedule's last interval."""

    def __init__(self, schedule: Any) -> None:
        self.schedule = schedule
        self.last = float(schedule.intervals_hours[-2] if len(schedule.intervals_hours) > 1
                          else schedule.intervals_hours[-1])

    def interval_hours(self, done_since_start_hours: float) -> float:
        w = max(done_since_start_hours, 0.0)
        nxt = self.schedule.next_checkpoint_after(w)
        return max(float(nxt) - w, 1e-3) if nxt is not None else self.last


STEP_HOURS = 1 / 60
PLAN_HORIZON_HOURS = 4.0


def load_checkpoint_planner(model: LifetimeModel, delta_hours: float) -> CheckpointPlanner:
    """``policies.checkpoint.OptimalCheckpointPlanner`` when present, else Young's interval."""
    rng = np.random.default_rng(0)
    mttf = float(np.mean(model.sample(2000, rng)))
    try:
        mod = importlib.import_module("policies.checkpoint")
        delta = max(1, round(delta_hours / STEP_HOURS)) * STEP_HOURS
        planner = mod.OptimalCheckpointPlanner(model, step_hours=STEP_HOURS, delta_hours=delta)
        return ScheduleIntervals(planner.plan(PLAN_HORIZON_HOURS, 0.0))
    except (ModuleNotFoundError, AttributeError, TypeError) as exc:
        log.info("checkpoint planner not available (%s): Young's interval stands in", exc)
        return YoungCheckpointPlanner(delta_hours, mttf)
