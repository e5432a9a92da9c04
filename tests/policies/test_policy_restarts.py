"""A deadline policy restored from its ``state_dict`` mid-job decides exactly as one that never
stopped: the deadline-policy actor is restarted after a crash from the state it persisted."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from controlplane.core.errors import InvalidInput
from policies.deadline import Action, DeadlinePolicy, DeadlineTask, Observation, make_policy
from policies.deadline_sim import simulate

TASK = DeadlineTask(compute_hours=12.0, deadline_hours=20.0, overhead_hours=0.25, on_demand_price=3.0,
                    spot_price=1.0)
G = 0.25  # tick hours
TICKS = 100  # 25 h: past the deadline, so every policy finishes inside the window


def availability(seed: int) -> np.ndarray:
    """Spot up and down in runs of 1-12 ticks."""
    rng = np.random.default_rng(seed)
    out: list[bool] = []
    up = bool(rng.integers(2))
    while len(out) < TICKS:
        out += [up] * int(rng.integers(1, 13))
        up = not up
    return np.asarray(out[:TICKS], dtype=bool)


class RestartedAt:
    """Runs ``first`` until tick ``k``, then hands its state_dict to a new ``second`` (a restart)."""

    def __init__(self, first: DeadlinePolicy, second: DeadlinePolicy, k: int) -> None:
        self.task, self.first, self.second, self.k = first.task, first, second, k
        self.ticks = 0
        self.restored = False

    def decide(self, obs: Observation) -> Action:
        if self.ticks == self.k:
            self.second.load_state_dict(self.first.state_dict())
            self.restored = True
        self.ticks += 1
        return (self.second if self.restored else self.first).decide(obs)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def kwargs(name: str, avail: np.ndarray) -> dict[str, Any]:
    if name == "time_sliced":
        return {"n": 4}
    if name in ("partial_lookahead", "omniscient"):
        return {"availability": avail, "tick_hours": G} | ({"n": 4} if name == "partial_lookahead" else {})
    if name == "semi_markov_dp":
        return {"tick_hours": G}
    return {}


@pytest.mark.parametrize("name", ["greedy", "uniform_progress", "uniform_progress_loose", "time_sliced",
                                  "partial_lookahead", "omniscient", "on_demand", "semi_markov_dp"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_restored_policy_decides_as_one_that_never_stopped(name: str, seed: int) -> None:
    avail = availability(seed)
    whole = simulate(make_policy(name, TASK, **kwargs(name, avail)), avail, G, record=True)
    for k in range(1, TICKS, 2):  # every other tick: whatever the policy holds then
        restarted = RestartedAt(make_policy(name, TASK, **kwargs(name, avail)),
                                make_policy(name, TASK, **kwargs(name, np.zeros_like(avail)
                                                                 if name == "omniscient" else avail)), k)
        res = simulate(restarted, avail, G, record=True)  # type: ignore[arg-type]
        assert res.decisions is not None and whole.decisions is not None
        assert res.decisions.tolist() == whole.decisions.tolist(), (name, seed, k)
        assert (res.cost, res.finish_hours) == (whole.cost, whole.finish_hours)


@pytest.mark.parametrize("name", ["uniform_progress_loose", "time_sliced", "greedy", "partial_lookahead"])
def test_state_of_another_policy_is_refused(name: str) -> None:
    avail = availability(1)
    policy = make_policy(name, TASK, **kwargs(name, avail))
    with pytest.raises(InvalidInput) as bad:
        policy.load_state_dict({"name": "uniform_progress"} if name != "uniform_progress" else {"name": "x"})
    assert bad.value.field == "state"
    assert f"given to {policy.name!r}" in bad.value.message  # type: ignore[attr-defined]
