"""Deadline policies (Can't Be Late, Sec. 3.3-5.6) on hand-made and real traces."""

from __future__ import annotations

import numpy as np
import pytest

from controlplane.core.errors import InvalidInput
from policies.deadline import (
    DeadlineTask,
    Greedy,
    Kind,
    Observation,
    TimeSliced,
    UniformProgress,
    UniformProgressLoose,
    UniformProgressOracle,
    make_policy,
    policy_names,
)
from policies.deadline_sim import PolicyError, lifetime_oracle, simulate, window_ticks

G = 1 / 6  # the 10-minute tick of the 2-week traces
TASK = DeadlineTask(48.0, 60.0, 0.2)


def obs(t: float, cp: float, state: Kind, up: bool) -> Observation:
    return Observation(t, cp, state, None, up)


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("kwargs", "field", "text"),
    [
        ({"compute_hours": 10, "deadline_hours": 8, "overhead_hours": 0.2}, "deadline_hours", "choose deadline_hours >= 10.2"),
        ({"compute_hours": 10, "deadline_hours": 20, "overhead_hours": -0.1}, "overhead_hours", "d must be >= 0"),
        ({"compute_hours": 0, "deadline_hours": 20, "overhead_hours": 0.1}, "compute_hours", "must be > 0"),
        ({"compute_hours": 1, "deadline_hours": 2, "overhead_hours": 0.1, "nodes": 0}, "nodes", "must be >= 1"),
        ({"compute_hours": 1, "deadline_hours": float("inf"), "overhead_hours": 0.1}, "deadline_hours", "finite"),
        ({"compute_hours": 1, "deadline_hours": 2, "overhead_hours": 0.1, "on_demand_price": 0.0}, "spot_price", "prices must be > 0"),
        ({"compute_hours": 1, "deadline_hours": 2, "overhead_hours": 0.1, "spot_price": 0.0}, "spot_price", "prices must be > 0"),
    ],
)
def test_bad_task_rejected_with_field_and_fix(kwargs: dict, field: str, text: str) -> None:
    with pytest.raises(InvalidInput) as err:
        DeadlineTask(**kwargs)
    assert err.value.field == field
    assert text in str(err.value)


def test_empty_trace_and_unknown_policy_rejected() -> None:
    with pytest.raises(InvalidInput, match="empty"):
        simulate(Greedy(TASK), [], G)
    with pytest.raises(InvalidInput, match="must be > 0, got 0.0") as err:
        simulate(Greedy(TASK), [True], 0.0)
    assert err.value.field == "tick_hours"
    with pytest.raises(InvalidInput, match="unknown policy 'nope'"):
        make_policy("nope", TASK)
    assert {"greedy", "uniform_progress", "time_sliced", "up_oracle", "partial_lookahead", "omniscient", "on_demand", "spotplane"} <= set(policy_names())


def test_window_past_trace_end_rejected(catalog) -> None:
    tr = catalog.spot_traces("availability/1-node/aws-10-26-2022")[0]
    with pytest.raises(InvalidInput, match="outside the trace") as err:
        tr.window(tr.n_ticks - 10, 360)
    assert err.value.fix and "start_tick <=" in err.value.fix


def test_spot_while_unavailable_is_a_policy_error() -> None:
    class Bad(Greedy):
        def decide(self, o: Observation):  # type: ignore[no-untyped-def]
            return make_policy("greedy", TASK).decide(Observation(o.elapsed_hours, o.progress_hours, o.state, None, True))

    with pytest.raises(PolicyError, match="unavailable"):
        simulate(Bad(TASK), [False] * 5, G)


# ---------------------------------------------------------------------------- the three rules
def test_exploitation_and_thrifty_all_spot() -> None:
    """Spot up throughout: one changeover, C on spot, billing stops at the finish (Thrifty)."""
    for name in ("greedy", "uniform_progress", "time_sliced", "up_oracle"):
        kw = {"lifetime": lambda o: 100.0} if name == "up_oracle" else {}
        r = simulate(make_policy(name, TASK, tick_hours=G, **kw), [True] * 400, G, record=True)
        assert r.changeovers == 1, name
        assert r.spot_hours == pytest.approx(48.0) and r.od_hours == 0
        assert r.cost == pytest.approx(48.2) and r.finish_hours == pytest.approx(48.2)
        assert r.decisions is not None and not r.decisions[290:].any()  # idle after the finish


def test_safety_net_at_the_edge_no_spot() -> None:
    """No spot ever: greedy idles while R(t) >= C(t) + 2d, then on-demand, finishing just in time."""
    r = simulate(Greedy(TASK, tick_hours=G), [False] * 360, G, record=True)
    assert r.met_deadline and r.od_hours == pytest.approx(48.0) and r.changeovers == 1
    first_od = int(np.argmax(r.decisions == 2))  # type: ignore[arg-type]
    slack_then = 60 - first_od * G - 48
    assert slack_then < 2 * 0.2 <= slack_then + G  # the first tick where slack < 2d
    assert 60 - 2 * 0.2 <= r.finish_hours <= 60


def test_safety_net_with_coarse_ticks_keeps_the_deadline() -> None:
    """Ticks longer than d: the idle margin max(2d, d + tick) still leaves room for on-demand."""
    task = DeadlineTask(10.0, 13.0, 0.2)
    for g in (0.5, 0.75, 1.0):
        r = simulate(Greedy(task, tick_hours=g), [False] * 40, g)
        assert r.met_deadline, g
        r = simulate(UniformProgress(task, tick_hours=g), [False] * 40, g)
        assert r.met_deadline, g


def test_safety_net_survives_preemption_after_jump() -> None:
    """Spot appears exactly at the Safety-Net edge and vanishes after one tick: still on time."""
    n = 360
    for edge in range(5, 80):
        up = np.zeros(n, dtype=bool)
        up[edge] = True
        for pol in (Greedy(TASK, tick_hours=G), UniformProgress(TASK, tick_hours=G), TimeSliced(TASK, 8, tick_hours=G)):
            assert simulate(pol, up, G).met_deadline


def test_no_policy_without_future_knowledge_misses_on_random_traces() -> None:
    rng = np.random.default_rng(3)
    for _ in range(150):
        c = float(rng.uniform(2, 20))
        d = float(rng.choice([0.05, 0.2, 0.5, 1.0]))
        r_ = c + d + float(rng.uniform(0, c))
        task = DeadlineTask(c, r_, d, on_demand_price=float(rng.choice([1.5, 3.0, 6.0])))
        g = float(rng.choice([G, 0.25, 0.5]))
        n = window_ticks(r_, g)
        p_up = rng.uniform(0.05, 0.95)
        up = rng.random(n) < p_up
        life = lifetime_oracle(up, g)
        for pol in (
            Greedy(task, tick_hours=g),
            UniformProgress(task, tick_hours=g),
            TimeSliced(task, int(rng.integers(1, 20)), tick_hours=g),
            UniformProgressLoose(task, tick_hours=g),
            UniformProgressOracle(task, lambda o, life=life, g=g: float(life[int(round(o.elapsed_hours / g))]), tick_hours=g),
        ):
            res = simulate(pol, up, g)
            assert res.met_deadline, (type(pol).__name__, c, r_, d, g)


# ---------------------------------------------------------------------------- Uniform Progress
def test_up_rule1_idle_behind_goes_on_demand() -> None:
    up = UniformProgress(TASK, tick_hours=G)
    assert up.decide(obs(0.0, 0.0, Kind.IDLE, False)).kind is Kind.IDLE  # cp = ep = 0
    assert up.decide(obs(G, 0.0, Kind.IDLE, False)).kind is Kind.ON_DEMAND  # behind ep(t)
    assert up.decide(obs(10.0, 9.0, Kind.IDLE, False)).kind is Kind.IDLE  # ahead of ep(10) = 8
    assert Greedy(TASK, tick_hours=G).decide(obs(G, 0.0, Kind.IDLE, False)).kind is Kind.IDLE


def test_up_rule2_taking_risks_even_when_behind() -> None:
    up = UniformProgress(TASK, tick_hours=G)
    assert up.decide(obs(20.0, 14.0, Kind.IDLE, True)).kind is Kind.SPOT  # behind ep(20) = 16
    assert up.decide(obs(20.0, 14.0, Kind.SPOT, True)).kind is Kind.SPOT  # Exploitation


def test_up_rule3_hysteresis_boundary() -> None:
    """On on-demand with spot up: stay until cp(t) >= ep(t + 2d), then take the spot."""
    up = UniformProgress(TASK, tick_hours=G)
    t = 20.0
    ep2d = (t + 0.4) * 0.8
    assert up.decide(obs(t, ep2d - 1e-6, Kind.ON_DEMAND, True)).kind is Kind.ON_DEMAND
    assert up.decide(obs(t, ep2d + 1e-6, Kind.ON_DEMAND, True)).kind is Kind.SPOT
    assert up.decide(obs(t, t * 0.8 + 1e-6, Kind.ON_DEMAND, True)).kind is Kind.ON_DEMAND  # ep(t) met, ep(t+2d) not


def test_up_safety_net_on_demand_to_the_end() -> None:
    up = UniformProgress(TASK, tick_hours=G)
    # slack 0.3 < 2d: spot would be unsafe even far ahead of the uniform line
    assert up.decide(obs(59.0, 47.3, Kind.ON_DEMAND, True)).kind is Kind.ON_DEMAND
    assert up.decide(obs(59.0, 47.3, Kind.IDLE, True)).kind is Kind.ON_DEMAND
    assert up.decide(obs(50.0, 37.0, Kind.IDLE, False)).kind is Kind.ON_DEMAND  # slack 1 h, behind


def test_up_is_parameter_free_and_stateless() -> None:
    import inspect

    params = set(inspect.signature(UniformProgress).parameters)
    assert params == {"task", "tick_hours"}
    p = UniformProgress(TASK)
    state = p.state_dict()
    q = UniformProgress(TASK)
    q.load_state_dict(state)
    o = obs(30.0, 20.0, Kind.IDLE, False)
    assert p.decide(o) == q.decide(o)
    with pytest.raises(InvalidInput):
        q.load_state_dict({"name": "greedy"})


def test_up_beats_greedy_on_figure4_like_window() -> None:
    """Spot for 20 h, none for 25 h, then spot again: greedy rides the first spot, then
    stays on on-demand to the end; UP catches up on on-demand early and takes the late spot."""
    up = np.zeros(360, dtype=bool)
    up[:120] = True
    up[270:] = True
    g = simulate(Greedy(TASK, tick_hours=G), up, G)
    u = simulate(UniformProgress(TASK, tick_hours=G), up, G)
    assert g.met_deadline and u.met_deadline
    assert g.spot_hours == pytest.approx(19.8) and g.changeovers == 2
    assert u.spot_hours > g.spot_hours + 7 and u.cost < g.cost - 10


def test_up_loose_is_greedy_until_the_switch_then_uniform_from_there() -> None:
    """App. A.8: C/R = 0.5 < 0.7: no on-demand while C(t)/R(t) < 0.7, then UP on the re-anchored line."""
    task = DeadlineTask(30.0, 60.0, 0.2)
    pol = UniformProgressLoose(task, tick_hours=G)
    assert pol.decide(obs(5.0, 0.0, Kind.IDLE, False)).kind is Kind.IDLE  # plain UP would be on-demand
    assert UniformProgress(task, tick_hours=G).decide(obs(5.0, 0.0, Kind.IDLE, False)).kind is Kind.ON_DEMAND
    # C(t)/R(t) = 30 / 42 >= 0.7 at t = 18 with no progress: anchored at (18, 0), rate 30/42
    assert pol.decide(obs(18.0, 0.0, Kind.IDLE, False)).kind is Kind.IDLE  # on the line: cp = ep
    assert pol.decide(obs(19.0, 0.5, Kind.IDLE, False)).kind is Kind.ON_DEMAND  # ep = 0.71 > 0.5
    assert pol.state_dict()["t0"] == pytest.approx(18.0)
    tight = UniformProgressLoose(TASK, tick_hours=G)  # C/R = 0.8 >= 0.7: plain UP from the start
    assert tight.decide(obs(G, 0.0, Kind.IDLE, False)).kind is Kind.ON_DEMAND


# ---------------------------------------------------------------------------- oracle and slices
def test_oracle_thresholds() -> None:
    """From idle take spot iff o(t) > k d / (k - 1); from on-demand iff o(t) > 2 k d / (k - 1)."""
    life = {"v": 0.0}
    pol = UniformProgressOracle(TASK, lambda o: life["v"], tick_hours=G)
    k, d = 3.0, 0.2
    for v, state, want in (
        (k * d / (k - 1) - 0.01, Kind.IDLE, Kind.IDLE),
        (k * d / (k - 1) + 0.01, Kind.IDLE, Kind.SPOT),
        (2 * k * d / (k - 1) - 0.01, Kind.ON_DEMAND, Kind.ON_DEMAND),
        (2 * k * d / (k - 1) + 0.01, Kind.ON_DEMAND, Kind.SPOT),
    ):
        life["v"] = v
        assert pol.decide(obs(10.0, 9.0, state, True)).kind is want, (v, state)


def test_time_sliced_one_slice_is_greedy(catalog) -> None:
    tr = catalog.spot_traces("availability/1-node/aws-10-26-2022")[2]
    up = tr.spot_up()
    for s in (0, 500, 1700, 3000):
        w = up[s : s + 360]
        a = simulate(TimeSliced(TASK, 1, tick_hours=G), w, G)
        b = simulate(Greedy(TASK, tick_hours=G), w, G)
        assert a.cost == pytest.approx(b.cost)


def test_time_sliced_enforces_slice_targets() -> None:
    """No spot at all: on-demand is used in every slice to reach i C / n by t_i."""
    ts = TimeSliced(TASK, 4, tick_hours=G)
    r = simulate(ts, [False] * 360, G, record=True)
    assert r.met_deadline
    dec = r.decisions
    assert dec is not None
    for i in range(4):
        assert (dec[i * 90 : (i + 1) * 90] == 2).any()


# ---------------------------------------------------------------------------- gang (Sec. 5.5)
def test_gang_polarization_on_4_node_trace(catalog) -> None:
    tr = catalog.spot_traces("preemption/4-node")[1]
    task = DeadlineTask(12.0, 15.0, 0.2, nodes=4)
    g = tr.gap_hours
    n = window_ticks(15.0, g)
    partial = np.flatnonzero((tr.available > 0) & (tr.available < 4))
    assert partial.size > 0  # the trace has partial availability: the rule matters
    start = int(max(0, partial[0] - 20))
    up = tr.spot_up(4)[start : start + n]
    r = simulate(UniformProgress(task, tick_hours=g), up, g, record=True)
    assert r.met_deadline
    spot_ticks = np.flatnonzero(r.decisions == 1)  # type: ignore[arg-type]
    assert (tr.available[start + spot_ticks] == 4).all()  # spot only with the whole gang up
    assert r.cost == pytest.approx(4 * (r.spot_billed_hours * 1.0 + r.od_billed_hours * 3.0))


# ---------------------------------------------------------------------------- relaxed C and d (Sec. 5.6)
@pytest.mark.parametrize("name", ["greedy", "uniform_progress", "time_sliced", "on_demand"])
def test_relaxed_compute_and_overhead_bounds(catalog, name: str) -> None:
    """True C = estimate + delta, changeovers up to d_max: finish <= R + max(delta, 0) + 2 (d_max - d)."""
    rng = np.random.default_rng(7)
    traces = catalog.spot_traces("availability/1-node/aws-10-26-2022")
    task = DeadlineTask(24.0, 30.0, 0.2)
    for _ in range(40):
        tr = traces[int(rng.integers(len(traces)))]
        g = tr.gap_hours
        delta = float(rng.uniform(-4, 4))
        d_max = float(rng.choice([0.2, 0.4, 0.6]))
        overheads = rng.uniform(2 * 0.2 - d_max if d_max < 0.4 else 0.0, d_max, size=64)
        bound = 30.0 + max(delta, 0.0) + 2 * (d_max - 0.2)
        n = window_ticks(bound + 1, g)
        s = int(rng.integers(0, tr.n_ticks - n))
        pol = make_policy(name, task, tick_hours=g)
        r = simulate(pol, tr.spot_up()[s : s + n], g, actual_compute_hours=24.0 + delta, overheads=overheads)
        assert r.finish_hours <= bound + 1e-6, (name, delta, d_max, r.finish_hours, bound)


def test_real_windows_never_miss(catalog) -> None:
    """A slice of the benchmark: every non-clairvoyant policy meets every deadline."""
    rng = np.random.default_rng(11)
    for tr in catalog.spot_traces("availability/1-node/aws-10-26-2022"):
        g = tr.gap_hours
        up = tr.spot_up()
        for s in rng.integers(0, tr.n_ticks - 360, size=6):
            for name in ("greedy", "uniform_progress", "on_demand"):
                assert simulate(make_policy(name, TASK, tick_hours=g), up[s : s + 360], g).met_deadline


def test_up_loose_at_exactly_the_switch_fraction_is_plain_up_from_the_start() -> None:
    """C/R = 7 / 10 = 0.7 = switch: anchored at t0 = 0 (the greedy phase is for C/R < switch);
    just below (6.99 / 10) it has no anchor yet."""
    assert UniformProgressLoose(DeadlineTask(7.0, 10.0, 0.2), tick_hours=G).state_dict()["t0"] == 0.0
    assert UniformProgressLoose(DeadlineTask(6.99, 10.0, 0.2), tick_hours=G).state_dict()["t0"] is None


def test_up_loose_rejects_a_switch_outside_0_1_naming_the_field() -> None:
    with pytest.raises(InvalidInput, match=r"must be in \(0, 1\], got 1.5") as err:
        UniformProgressLoose(TASK, tick_hours=G, switch=1.5)
    assert err.value.field == "switch"


def test_time_sliced_goes_on_demand_when_the_slice_target_is_out_of_reach() -> None:
    """C = 48, R = 60, d = 0.2, n = 4 (slices of 15 h, targets 12 C/48 per slice). At t = 20 h
    (slice 2: t_2 = 30, target 24) with 12.4 h done the slice needs 11.6 h in 10 h: slack_2 =
    (30 - 20) - (24 - 12.4) = -1.6 < the idle margin, so on-demand, although the global slack
    (60 - 20) - (48 - 12.4) = 4.4 h would still allow idling. At t = 16 h with 14 h done slack_2
    = 14 - 10 = 4 h: idle while spot is down."""
    assert TimeSliced(TASK, 4, tick_hours=G).decide(obs(20.0, 12.4, Kind.IDLE, False)).kind is Kind.ON_DEMAND
    assert TimeSliced(TASK, 4, tick_hours=G).decide(obs(16.0, 14.0, Kind.IDLE, False)).kind is Kind.IDLE
