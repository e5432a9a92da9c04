"""semi_markov_dp: hazards and values by hand, its decisions at chosen run / gap ages, that it
never reads the trace after the current tick, and that a live deadline job may name it."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.deadline import COLLECTIONS
from controlplane.core.errors import InvalidInput
from controlplane.core.models import JobKind, JobSpec
from controlplane.reconcile.policyhost import PolicyBook, PolicyRequest, check_policy, live_policies
from policies.deadline import DeadlineTask, Kind, Observation, make_policy
from policies.deadline_sim import simulate, window_ticks
from policies.semimarkov import (
    AvailabilityModel,
    Guards,
    SemiMarkovDP,
    fit_availability,
    max_age_ticks,
    segments,
    solve,
)

G = 1 / 6  # the 10-minute tick of the 2-week traces
TASK = DeadlineTask(48.0, 60.0, 0.2)
A = max_age_ticks(G)


def model(up_young: float, up_old: float, down_young: float, down_old: float) -> AvailabilityModel:
    """Hazards: age 1 ``*_young``, every later age ``*_old``."""
    up = np.full(A, up_old)
    up[0] = up_young
    down = np.full(A, down_old)
    down[0] = down_young
    return AvailabilityModel(up, down)


def obs(t: float, cp: float, state: Kind, up: bool) -> Observation:
    return Observation(t, cp, state, None, up)


# ---------------------------------------------------------------------------- the model
def test_segments_and_hazards_by_hand() -> None:
    hist = np.array([0, 1, 1, 0, 1, 1, 0, 1], dtype=bool)
    assert segments(hist) == [(False, 1), (True, 2), (False, 1), (True, 2), (False, 1), (True, 1)]
    m = fit_availability(hist, G)
    # up: the first run is unseen, two runs of 2 ended, the last run (1 tick) is censored;
    # pooled prior (2 ends + 1) / (4 ticks at risk + 18 prior ticks) with weight 2 at each age
    pooled = 3 / 22
    assert m.up_hazard[0] == pytest.approx((0 + 2 * pooled) / (2 + 2))
    assert m.up_hazard[1] == pytest.approx((2 + 2 * pooled) / (2 + 2))
    assert m.up_hazard[2:] == pytest.approx(np.full(A - 2, pooled))
    # down: the first gap is left out, two gaps of 1 ended; pooled (2 + 1) / (2 + 6)
    assert m.down_hazard[0] == pytest.approx((2 + 2 * 3 / 8) / (2 + 2))
    assert m.down_hazard[1:] == pytest.approx(np.full(A - 1, 3 / 8))


def test_a_model_refuses_hazards_outside_0_1() -> None:
    with pytest.raises(Exception, match="probabilities"):
        AvailabilityModel(np.full(3, 1.5), np.full(3, 0.5))


# ---------------------------------------------------------------------------- the values
def test_values_of_a_three_tick_job_by_hand() -> None:
    """C = 1 tick, R = 3 ticks, d = 0, on-demand 3 per hour: a tick costs 1/6 on spot, 1/2 on demand."""
    task = DeadlineTask(G, 3 * G, 0.0)
    v = solve(task, G, model(0.5, 0.5, 0.5, 0.5))  # grid: slack 0, 0.5, 1, ... ticks
    up, down = 0, A
    assert v[1, 0, down, 0] == pytest.approx(0.5)  # no slack: on-demand for the last tick
    assert v[1, 0, down, 2] == 0.0  # slack 1 tick with 1 tick left: done
    assert v[2, 0, up, 2] == pytest.approx(1 / 6)  # spot now finishes it
    assert v[2, 0, down, 2] == pytest.approx(0.5)  # idle then on-demand, or on-demand now
    # no slack, 2 ticks of work: on demand now, then on demand again or, when spot comes up
    # (p = 0.5), spot (with d = 0 the 2d margin allows the move)
    assert v[2, 0, down, 0] == pytest.approx(0.5 + 0.5 * 0.5 + 0.5 / 6)


# ---------------------------------------------------------------------------- decisions
def policy(m: AvailabilityModel, tail: list[bool]) -> SemiMarkovDP:
    """The policy with model ``m`` whose past ends with ``tail`` (the age of the current run or gap)."""
    return SemiMarkovDP(TASK, tick_hours=G, history=np.asarray(tail, dtype=bool), model=m)


def test_on_demand_takes_a_spot_run_only_once_it_has_lasted() -> None:
    """With 0.5 h of slack (2d = 0.4 h) a move to spot that dies at once leaves too little to wait."""
    m = model(up_young=0.95, up_old=0.001, down_young=0.5, down_old=0.05)
    here = obs(30.0, 48.0 - 29.5, Kind.ON_DEMAND, True)
    fresh = policy(m, [False]).decide(here)  # run of age 1
    lasted = policy(m, [False, True, True]).decide(here)  # age 3
    assert (fresh.kind, lasted.kind) == (Kind.ON_DEMAND, Kind.SPOT)


def test_a_young_gap_is_worth_more_than_an_old_one() -> None:
    m = model(up_young=0.01, up_old=0.01, down_young=0.9, down_old=0.001)
    v = solve(TASK, G, m)
    young, old = v[300, 0, A], v[300, 0, A + 10]  # idle, 300 ticks left, gap of age 1 / 11
    assert np.all(young[10:] < old[10:] - 1.0)  # (slack >= 5 ticks: room to wait)


def test_uniform_progress_rules_come_first() -> None:
    p = policy(model(0.5, 0.5, 0.9, 0.9), [True])
    assert p.decide(obs(10.0, 5.0, Kind.SPOT, True)).kind is Kind.SPOT  # Exploitation
    # idle with slack 0.35 h < max(2d, d + tick) = 0.4 h: Safety Net, even with spot up
    assert p.decide(obs(12.0 - 0.35 + 1.0, 1.0, Kind.IDLE, True)).kind is Kind.ON_DEMAND
    # on demand with slack 0.39 h < 2d: stays, however likely spot is
    assert p.decide(obs(12.0 - 0.39 + 2.0, 2.0, Kind.ON_DEMAND, True)).kind is Kind.ON_DEMAND
    assert p.decide(obs(30.0, 48.0, Kind.SPOT, True)).kind is Kind.SPOT  # done: Sec. 5.6 overrun


def test_it_never_idles_below_the_floor_under_the_uniform_progress_line() -> None:
    """A gap sure to close next tick still does not pull the slack under 0.65 of UP's line."""
    p = policy(model(0.01, 0.01, 0.999, 0.999), [True])
    # t = 30 h: UP's line keeps 6 h of slack, the floor 3.9 h; 3.8 h left
    assert p.decide(obs(30.0, 48.0 - (30.0 - 3.8), Kind.IDLE, False)).kind is Kind.ON_DEMAND
    assert p.decide(obs(30.0, 48.0 - (30.0 - 4.2), Kind.IDLE, False)).kind is Kind.IDLE


def test_the_guards_set_the_floor_and_whether_on_demand_may_wait() -> None:
    """Guards(0.0) idles at 3.8 h of slack where the default floor does not; leaving on-demand to
    wait is allowed only with od_to_idle."""
    m = model(0.01, 0.01, 0.999, 0.999)
    low = SemiMarkovDP(TASK, tick_hours=G, history=np.asarray([True]), model=m, guards=Guards(0.0))
    assert low.decide(obs(30.0, 48.0 - (30.0 - 3.8), Kind.IDLE, False)).kind is Kind.IDLE
    on_od = obs(30.0, 48.0 - (30.0 - 5.5), Kind.ON_DEMAND, False)
    assert policy(m, [True]).decide(on_od).kind is Kind.ON_DEMAND
    wait = SemiMarkovDP(TASK, tick_hours=G, history=np.asarray([True]), model=m, guards=Guards(0.65, True))
    assert wait.decide(on_od).kind is Kind.IDLE
    with pytest.raises(InvalidInput):
        Guards(1.5)


def test_state_dict_round_trip_keeps_the_age() -> None:
    m = model(0.95, 0.001, 0.5, 0.05)
    a = policy(m, [False])
    for i in range(3):
        a.decide(obs(i * G, 0.0, Kind.ON_DEMAND, True))
    b = policy(m, [False])
    b.load_state_dict(a.state_dict())
    o = obs(3 * G, 0.0, Kind.ON_DEMAND, True)
    assert a.decide(o) == b.decide(o)


# ---------------------------------------------------------------------------- no future
def test_decisions_up_to_t_never_read_the_trace_after_t(catalog) -> None:
    """120 random (window, t): every value after tick t redrawn at random, decisions to t unchanged."""
    task = DeadlineTask(8.0, 10.0, 0.2)
    traces = catalog.spot_traces(COLLECTIONS["2w"])
    rng = np.random.default_rng(7)
    n = window_ticks(task.deadline_hours, G)
    checked = 0
    for _ in range(120):
        tr = traces[int(rng.integers(len(traces)))]
        up = tr.spot_up(1)
        start = int(rng.integers(0, up.size - n))
        t = int(rng.integers(0, n))
        other = up.copy()
        other[start + t + 1 :] = rng.random(up.size - start - t - 1) < 0.5
        runs = []
        for trace in (up, other):
            pol = make_policy("semi_markov_dp", task, tick_hours=G, history=trace[:start])
            runs.append(simulate(pol, trace[start : start + n], G, record=True).decisions)
        a, b = runs
        assert a is not None and b is not None
        assert a[: t + 1].tolist() == b[: t + 1].tolist(), (tr.name, start, t)
        checked += 1
    assert checked >= 100


def test_no_deadline_missed_on_real_windows(catalog) -> None:
    task = DeadlineTask(16.0, 20.0, 0.2)
    rng = np.random.default_rng(3)
    n = window_ticks(task.deadline_hours, G)
    for tr in catalog.spot_traces(COLLECTIONS["2w"]):
        up = tr.spot_up(1)
        for start in rng.integers(0, up.size - n, size=3).tolist():
            pol = make_policy("semi_markov_dp", task, tick_hours=G, history=up[:start])
            assert simulate(pol, up[start : start + n], G).met_deadline, (tr.name, start)


# ---------------------------------------------------------------------------- live
def test_a_live_deadline_job_may_name_it() -> None:
    assert check_policy("semi_markov_dp") == "semi_markov_dp" and "semi_markov_dp" in live_policies()
    spec = JobSpec(name="ft", kind=JobKind.DEADLINE, compute_hours=4.0, deadline_hours=10.0, policy="semi_markov_dp")
    assert spec.policy == "semi_markov_dp"
    book = PolicyBook()
    task = DeadlineTask(4.0, 10.0, 0.1)
    acts = book.decide([PolicyRequest("j", "semi_markov_dp", task, obs(0.0, 0.0, Kind.IDLE, True), 1 / 60)])
    assert acts["j"].kind is Kind.SPOT  # type: ignore[union-attr]
    pol = book.policies["j"]
    assert isinstance(pol, SemiMarkovDP) and pol.step_hours == pytest.approx(1 / 6)  # no past: prior, 10-min steps
