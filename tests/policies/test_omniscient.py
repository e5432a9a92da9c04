"""Omniscient (Eq. 6-10) = brute force on small windows; its variants and Partial Lookahead."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from controlplane.core.errors import InvalidInput
from policies.deadline import DeadlineTask, Greedy, Kind, Observation, PlanPolicy, UniformProgress
from policies.deadline_sim import simulate, window_ticks
from policies.omniscient import (
    Omniscient,
    PartialLookahead,
    brute_force_cost,
    heterogeneous_plan,
    omniscient_plan,
    plan_modes,
    single_zone_modes,
)

G = 1 / 6


def test_dp_equals_brute_force_on_random_small_windows() -> None:
    rng = np.random.default_rng(1)
    for _ in range(25):
        n = int(rng.integers(4, 8))
        g = 1.0
        d = float(rng.choice([0.0, 0.25, 0.5, 1.0, 1.5]))
        c = float(rng.uniform(0.5, max(0.6, n - 1 - d)))
        r = float(rng.uniform(c + d, n))
        task = DeadlineTask(c, r, d, on_demand_price=float(rng.choice([1.5, 3.0, 5.0])))
        up = rng.random(n) < rng.uniform(0.2, 0.9)
        plan = omniscient_plan(task, up, g)
        best = brute_force_cost(task, up, g)
        assert plan.cost == pytest.approx(best, abs=1e-9), (c, r, d, up)
        replay = simulate(Omniscient(task, up, tick_hours=g), up, g)
        assert replay.met_deadline and replay.cost == pytest.approx(plan.cost, abs=1e-9)


def test_dp_equals_brute_force_on_real_trace_snippets(catalog) -> None:
    """7-tick windows of a real trace at its 10-minute tick, d = 0.2 h (not a tick multiple)."""
    tr = catalog.spot_traces("availability/1-node/aws-10-26-2022")[6]
    up = tr.spot_up()
    task = DeadlineTask(0.75, 7 * G, 0.2)
    flips = np.flatnonzero(np.diff(up.astype(int)) != 0)
    for s in flips[flips >= 3][:12] - 3:
        w = up[s : s + 7]
        assert omniscient_plan(task, w, G).cost == pytest.approx(brute_force_cost(task, w, G), abs=1e-9)


def test_infeasible_window_reported() -> None:
    task = DeadlineTask(1.0, 1.2, 0.2)
    plan = omniscient_plan(task, [False], 1.0)  # a single 1 h tick cannot hold d + C = 1.2 h
    assert not plan.feasible and plan.cost == float("inf")
    with pytest.raises(InvalidInput, match="empty"):
        omniscient_plan(task, [], 1.0)


@pytest.mark.slow
def test_omniscient_lower_bounds_every_policy_on_real_windows(catalog) -> None:
    task = DeadlineTask(48.0, 60.0, 0.2)
    rng = np.random.default_rng(5)
    for tr in catalog.spot_traces("availability/1-node/aws-10-26-2022")[::3]:
        up = tr.spot_up()
        for s in rng.integers(0, tr.n_ticks - 360, size=2):
            w = up[s : s + 360]
            om = Omniscient(task, w, tick_hours=G)
            r = simulate(om, w, G)
            assert r.met_deadline and r.cost == pytest.approx(om.result.cost, rel=1e-9)
            for pol in (Greedy(task, tick_hours=G), UniformProgress(task, tick_hours=G), PartialLookahead(task, w, n=8, tick_hours=G)):
                other = simulate(pol, w, G)
                assert other.met_deadline
                assert r.cost <= other.cost + 1e-9


def test_plan_policy_round_trips_state() -> None:
    task = DeadlineTask(2.0, 4.0, 0.5)
    p = PlanPolicy(task, np.array([1, 1, 2, 2], dtype=np.int8), tick_hours=1.0)
    q = PlanPolicy(task, np.zeros(4, dtype=np.int8), tick_hours=1.0)
    q.load_state_dict(p.state_dict())
    assert q.plan.tolist() == [1, 1, 2, 2]


def _brute_force_heterogeneous(task: DeadlineTask, counts: list[int], g: float) -> float:
    """Every sequence of configs (idle or s spot + N - s on-demand, s <= a(t)); Eq. 23-32 accounting."""
    n = task.nodes
    best = float("inf")
    options = [[-1] + list(range(0, a + 1)) for a in counts]
    for combo in itertools.product(*options):
        progress, cost, prev, oh, done = 0.0, 0.0, None, 0.0, False
        for t, s in enumerate(combo):
            if s < 0:
                prev = None
                continue
            if s != prev:
                oh = task.overhead_hours
            prev = s
            price = s * task.spot_price + (n - s) * task.on_demand_price
            use = min(oh, g)
            oh -= use
            gain = g - use
            if progress + gain >= task.compute_hours - 1e-12:
                used = use + task.compute_hours - progress
                cost += price * used
                done = t * g + used <= task.deadline_hours + 1e-9
                break
            progress += gain
            cost += price * g
        if done:
            best = min(best, cost)
    return best


def test_heterogeneous_equals_brute_force_and_beats_homogeneous() -> None:
    rng = np.random.default_rng(2)
    for _ in range(8):
        task = DeadlineTask(2.5, 5.0, 0.5, nodes=2)
        counts = [int(x) for x in rng.integers(0, 3, size=5)]
        het = heterogeneous_plan(task, counts, 1.0)
        assert het.cost == pytest.approx(_brute_force_heterogeneous(task, counts, 1.0), abs=1e-9), counts
        homo = omniscient_plan(task, np.asarray(counts) >= 2, 1.0)
        assert het.cost <= homo.cost + 1e-9


def test_heterogeneous_by_brute_force_at_other_prices_and_its_modes() -> None:
    """Eq. 23-32 with prices that are not 1 and 3 (so s * spot != s / spot) and a gang of three."""
    rng = np.random.default_rng(5)
    for _ in range(4):
        task = DeadlineTask(2.0, 4.0, 0.5, on_demand_price=2.6, spot_price=0.7, nodes=3)
        counts = [int(x) for x in rng.integers(0, 4, size=4)]
        het = heterogeneous_plan(task, counts, 1.0)
        assert het.cost == pytest.approx(_brute_force_heterogeneous(task, counts, 1.0), abs=1e-9), counts
        assert [(m.kind, m.price, m.spot_nodes) for m in het.mode_list] == [
            (Kind.IDLE, 0.0, 0), (Kind.SPOT, pytest.approx(2.1), 3), (Kind.ON_DEMAND, pytest.approx(1.4 + 2.6), 2),
            (Kind.ON_DEMAND, pytest.approx(0.7 + 5.2), 1), (Kind.ON_DEMAND, pytest.approx(7.8), 0)]
    with pytest.raises(InvalidInput) as bad:
        heterogeneous_plan(DeadlineTask(2.0, 4.0, 0.5), [], 1.0)
    assert (bad.value.message, bad.value.fix) == (
        "available_counts: the trace window is empty", "give at least one tick")
    one = heterogeneous_plan(DeadlineTask(1.0, 4.0, 0.0, spot_price=0.5, nodes=1), [1], 1.0)
    assert one.feasible and one.cost == pytest.approx(0.5) and one.kinds() == [Kind.SPOT]


def test_heterogeneous_with_one_node_is_homogeneous(catalog) -> None:
    tr = catalog.spot_traces("availability/1-node/aws-10-26-2022")[1]
    task = DeadlineTask(8.0, 10.0, 0.2)
    w = tr.available[100:160]
    assert heterogeneous_plan(task, w, G).cost == pytest.approx(omniscient_plan(task, w >= 1, G).cost)


def test_gang_cost_scales_with_nodes(catalog) -> None:
    tr = catalog.spot_traces("preemption/4-node")[2]
    g = tr.gap_hours
    task1 = DeadlineTask(10.0, 12.5, 0.2, nodes=1)
    task4 = DeadlineTask(10.0, 12.5, 0.2, nodes=4)
    up = tr.spot_up(4)[:window_ticks(12.5, g)]
    assert omniscient_plan(task4, up, g).cost == pytest.approx(4 * omniscient_plan(task1, up, g).cost)


def test_partial_lookahead_meets_deadline_and_tracks_targets(catalog) -> None:
    task = DeadlineTask(48.0, 60.0, 0.2)
    tr = catalog.spot_traces("availability/1-node/aws-10-26-2022")[4]  # low availability (12%)
    up = tr.spot_up()
    for s in (0, 1000, 2500):
        w = up[s : s + 360]
        pl = PartialLookahead(task, w, n=8, tick_hours=G)
        r = simulate(pl, w, G, record=True)
        assert r.met_deadline
        state = pl.state_dict()
        assert state["slice"] == 7 and len(state["plan"]) == 360


def test_partial_lookahead_last_slice_keeps_room_for_a_changeover(catalog) -> None:
    """Job fraction 0.95, R not a tick multiple: slice ends fall on ticks, the last slice must still fit."""
    tr = catalog.spot_traces("availability/1-node/aws-10-26-2022")[2]
    task = DeadlineTask(48.0, 48.0 / 0.95, 0.2)
    n = window_ticks(task.deadline_hours, G)
    w = tr.spot_up()[2209 : 2209 + n]
    r = simulate(PartialLookahead(task, w, n=8, tick_hours=G), w, G)
    assert r.met_deadline and r.finish_hours <= task.deadline_hours


def test_partial_lookahead_plan_finishes_when_finishing_is_the_cheapest_rate() -> None:
    """Eq. 11 with the finish inside the horizon: 1 h of spot at $1/h finishes C = 1 h at $1 per
    hour of progress, no partial plan does better, so the plan is the finishing one."""
    task = DeadlineTask(1.0, 4.0, 0.0)
    up = np.ones(4, dtype=bool)
    plan = plan_modes(single_zone_modes(task), np.vstack([up, up, up]), 1.0, 1.0, 4.0, 0.0,
                      min_progress=0.5)
    assert (plan.feasible, plan.cost, plan.progress_hours, plan.changeovers) == (True, 1.0, 1.0, 1)
    assert plan.kinds() == [Kind.SPOT, Kind.IDLE, Kind.IDLE, Kind.IDLE]


def test_partial_lookahead_at_exactly_c_follows_the_overrun_rule() -> None:
    """Sec. 5.6: the estimate C reached (4 h of 4) but the job not done: a live spot is kept,
    otherwise on-demand, whatever the slice's availability."""
    task = DeadlineTask(4.0, 10.0, 0.2)
    for up in (True, False):
        for state, avail, want in ((Kind.IDLE, False, Kind.ON_DEMAND), (Kind.IDLE, True, Kind.ON_DEMAND),
                                   (Kind.SPOT, True, Kind.SPOT), (Kind.ON_DEMAND, True, Kind.ON_DEMAND)):
            pl = PartialLookahead(task, [up] * 20, n=4, tick_hours=0.5)
            assert pl.decide(Observation(2.0, 4.0, state, None, avail)).kind is want


def test_a_plan_that_ends_on_its_running_mode_finishes_when_its_work_is_done() -> None:
    """C = 2 h, d = 0.5 h, spot always up, 1-h ticks: spot from t = 0 makes 0.5 h in the first
    tick (the changeover), 1 h in the second and the last 0.5 h in the third on the same VM:
    done at 2.5 h, paying 2.5 spot hours at $1."""
    task = DeadlineTask(2.0, 6.0, 0.5)
    up = np.ones(6, dtype=bool)
    plan = plan_modes(single_zone_modes(task), np.vstack([up, up, up]), 1.0, 2.0, 6.0, 0.5)
    assert plan.kinds() == [Kind.SPOT] * 3 + [Kind.IDLE] * 3
    assert (plan.feasible, plan.cost, plan.finish_hours, plan.changeovers) == (True, 2.5, 2.5, 1)
