"""Multi-zone deadline policies and the multi-zone Omniscient on the 13 H100 zones."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from controlplane.core.errors import InvalidInput
from policies.deadline import (
    DeadlineTask,
    Kind,
    Observation,
    UniformProgress,
    ZoneView,
    make_policy,
)
from policies.deadline_sim import PolicyError, simulate, simulate_zones, window_ticks
from policies.multizone import (
    EagerFailover,
    MultiZonePlanPolicy,
    SpotplaneMultiZone,
    ZonePinned,
    multizone_plan,
)

NAMES = ["a", "b"]
SPOT = [1.0, 2.0]
OD = [5.0, 4.0]


def _views(up: list[bool]) -> tuple[ZoneView, ...]:
    return tuple(ZoneView(z, u, s, o) for z, u, s, o in zip(NAMES, up, SPOT, OD, strict=True))


class _Fixed:
    """Replays a given (kind, zone) per tick, for brute force."""

    def __init__(self, task: DeadlineTask, seq: list[tuple[Kind, str | None]], g: float) -> None:
        self.task, self.seq, self.g = task, seq, g

    def decide(self, obs: Observation):  # type: ignore[no-untyped-def]
        from policies.deadline import Action

        k, z = self.seq[int(round(obs.elapsed_hours / self.g))]
        return Action(k, z)

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        return None


def test_multizone_dp_equals_brute_force() -> None:
    rng = np.random.default_rng(4)
    g = 1.0
    for _ in range(6):
        n = 5
        task = DeadlineTask(2.6, 5.0, 0.5)
        avail = rng.random((2, n)) < 0.6
        plan = multizone_plan(task, avail, g, SPOT, OD)
        best = float("inf")
        choices = []
        for t in range(n):
            opts: list[tuple[Kind, str | None]] = [(Kind.IDLE, None), (Kind.ON_DEMAND, "b")]
            opts += [(Kind.SPOT, NAMES[z]) for z in range(2) if avail[z, t]]
            choices.append(opts)
        for combo in itertools.product(*choices):
            r = simulate_zones(_Fixed(task, list(combo), g), avail, g, NAMES, SPOT, OD)
            if r.met_deadline:
                best = min(best, r.cost)
        assert plan.cost == pytest.approx(best, abs=1e-9)
        replay = simulate_zones(MultiZonePlanPolicy(task, plan, NAMES, g), avail, g, NAMES, SPOT, OD)
        assert replay.cost == pytest.approx(plan.cost, abs=1e-9)


def test_zone_switch_is_a_changeover() -> None:
    task = DeadlineTask(3.0, 6.0, 0.5)
    seq: list[tuple[Kind, str | None]] = [(Kind.SPOT, "a"), (Kind.SPOT, "a"), (Kind.SPOT, "b"), (Kind.SPOT, "b"), (Kind.SPOT, "b"), (Kind.SPOT, "b")]
    avail = np.ones((2, 6), dtype=bool)
    r = simulate_zones(_Fixed(task, seq, 1.0), avail, 1.0, NAMES, SPOT, OD, record=True)
    assert r.changeovers == 2
    assert r.cost == pytest.approx(2 * 1.0 + 2.0 * (0.5 + 3.0 - 1.5))  # 1.5 h done in a, rest + d in b
    assert r.zones is not None and r.zones.tolist()[:3] == [0, 0, 1]


def test_zone_switch_bills_every_hour_held_including_the_last_partial_one() -> None:
    """Same replay as above: a for 2 h (0.5 h changeover, 1.5 h work), b from hour 2 (0.5 h
    changeover, 0.5 h work), then 1 h of b finishes the 3 h job at hour 4."""
    task = DeadlineTask(3.0, 6.0, 0.5)
    seq: list[tuple[Kind, str | None]] = [(Kind.SPOT, "a")] * 2 + [(Kind.SPOT, "b")] * 4
    r = simulate_zones(_Fixed(task, seq, 1.0), np.ones((2, 6), dtype=bool), 1.0, NAMES, SPOT, OD)
    assert (r.spot_billed_hours, r.od_billed_hours) == (4.0, 0.0)
    assert (r.spot_hours, r.progress_hours, r.finish_hours) == (3.0, 3.0, 4.0)


def test_multizone_plan_policy_state_names_it_and_lists_its_modes() -> None:
    """Both zones up for 3 h, C = 1 h, d = 0: the plan is 1 h of spot in a (mode 1, $1/h), then
    idle; its state names the policy and lists the modes per tick."""
    task = DeadlineTask(1.0, 3.0, 0.0)
    plan = multizone_plan(task, np.ones((2, 3), dtype=bool), 1.0, SPOT, OD)
    pol = MultiZonePlanPolicy(task, plan, NAMES, 1.0)
    assert plan.cost == 1.0
    assert pol.state_dict() == {"name": "multizone_omniscient", "modes": plan.modes.tolist()}
    assert [pol.plan.mode_list[m].kind for m in plan.modes.tolist()][0] is Kind.SPOT


def test_bad_multizone_actions_rejected() -> None:
    task = DeadlineTask(1.0, 3.0, 0.1)

    class NoZone(_Fixed):
        pass

    with pytest.raises(PolicyError, match="must name a known zone"):
        simulate_zones(NoZone(task, [(Kind.SPOT, None)] * 3, 1.0), np.ones((2, 3), bool), 1.0, NAMES, SPOT, OD)
    with pytest.raises(PolicyError, match="unavailable"):
        simulate_zones(NoZone(task, [(Kind.SPOT, "a")] * 3, 1.0), np.zeros((2, 3), bool), 1.0, NAMES, SPOT, OD)
    with pytest.raises(InvalidInput, match="same length"):
        simulate_zones(NoZone(task, [], 1.0), np.zeros((2, 3), bool), 1.0, NAMES, SPOT[:1], OD)
    with pytest.raises(InvalidInput, match="zones"):
        EagerFailover(task).decide(Observation(0.0, 0.0, Kind.IDLE, None, True))


def test_eager_failover_takes_cheapest_available_spot_and_cheapest_on_demand() -> None:
    task = DeadlineTask(10.0, 20.0, 0.2)
    pol = EagerFailover(task, tick_hours=0.5)
    a = pol.decide(Observation(1.0, 1.0, Kind.IDLE, None, False, _views([True, True])))
    assert (a.kind, a.zone) == (Kind.SPOT, "a")
    a = pol.decide(Observation(1.0, 1.0, Kind.IDLE, None, False, _views([False, True])))
    assert (a.kind, a.zone) == (Kind.SPOT, "b")
    a = pol.decide(Observation(5.0, 1.0, Kind.IDLE, None, False, _views([False, False])))
    assert (a.kind, a.zone) == (Kind.ON_DEMAND, "b")  # behind ep(t): on-demand where it is cheapest
    a = pol.decide(Observation(5.0, 3.0, Kind.SPOT, "b", True, _views([True, True])))
    assert (a.kind, a.zone) == (Kind.SPOT, "b")  # Exploitation: no move


def test_spotplane_migrates_only_when_it_pays() -> None:
    task = DeadlineTask(10.0, 20.0, 0.2)
    pol = SpotplaneMultiZone(task, tick_hours=0.5, prior_run_hours=6.0)
    # a (1.0/h) just came up: not yet a migration target (it may flicker)
    a = pol.decide(Observation(1.5, 1.3, Kind.SPOT, "b", True, _views([True, True])))
    assert (a.kind, a.zone) == (Kind.SPOT, "b")
    # on b (2.0/h), a up for 0.5 h with an expected 6-h run: saving 6 > d (1 + 2) = 0.6 -> move
    a = pol.decide(Observation(2.0, 1.8, Kind.SPOT, "b", True, _views([True, True])))
    assert (a.kind, a.zone) == (Kind.SPOT, "a")
    # tight slack: never risk a changeover
    a = pol.decide(Observation(9.6, 0.0, Kind.SPOT, "b", True, _views([True, True])))
    assert (a.kind, a.zone) == (Kind.SPOT, "b")
    state = pol.state_dict()
    other = SpotplaneMultiZone(task, tick_hours=0.5)
    other.load_state_dict(state)
    assert other.expected_run("a") == pytest.approx(pol.expected_run("a"))


def test_spotplane_learns_run_lengths_from_history() -> None:
    task = DeadlineTask(10.0, 20.0, 0.2)
    hist = np.array([[1, 1, 0, 1, 1, 0, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1, 1, 0]], dtype=bool)
    pol = SpotplaneMultiZone(task, tick_hours=1.0, prior_run_hours=6.0, history=hist, zone_names=NAMES)
    assert pol.expected_run("a") == pytest.approx((6.0 + 6.0) / 4)  # three 2-h runs + prior
    assert pol.expected_run("b") == pytest.approx((8.0 + 6.0) / 2)


def test_zone_pinned_matches_single_zone_replay(catalog) -> None:
    zones = catalog.h100_zones()
    z = zones[4]
    g = z.gap_hours
    task = DeadlineTask(24.0, 30.0, 0.2, on_demand_price=z.on_demand_price_per_hour, spot_price=z.spot_price_per_hour)
    n = window_ticks(30.0, g)
    avail = np.vstack([t.spot_up()[:n] for t in zones])
    names = [t.zone for t in zones]
    sp = [t.spot_price_per_hour for t in zones]
    od = [t.on_demand_price_per_hour for t in zones]
    multi = simulate_zones(ZonePinned(UniformProgress(task, tick_hours=g), z.zone), avail, g, names, sp, od)
    single = simulate(UniformProgress(task, tick_hours=g), z.spot_up()[:n], g)
    assert multi.cost == pytest.approx(single.cost) and multi.changeovers == single.changeovers


@pytest.mark.slow
def test_multizone_policies_meet_deadlines_and_omniscient_bounds(catalog) -> None:
    zones = catalog.h100_zones()
    g = zones[0].gap_hours
    names = [t.zone for t in zones]
    sp = [t.spot_price_per_hour for t in zones]
    od = [t.on_demand_price_per_hour for t in zones]
    up = np.vstack([t.spot_up() for t in zones])
    task = DeadlineTask(48.0, 60.0, 0.2, on_demand_price=min(od), spot_price=min(sp))
    n = window_ticks(60.0, g)
    for s in (0, 1700):
        w = up[:, s : s + n]
        plan = multizone_plan(task, w, g, sp, od)
        omni = simulate_zones(MultiZonePlanPolicy(task, plan, names, g), w, g, names, sp, od)
        assert omni.cost == pytest.approx(plan.cost, rel=1e-9)
        for pol in (EagerFailover(task, tick_hours=g), SpotplaneMultiZone(task, tick_hours=g, history=up[:, :s], zone_names=names)):
            r = simulate_zones(pol, w, g, names, sp, od)
            assert r.met_deadline
            assert r.cost >= omni.cost - 1e-9


def test_spotplane_expected_run_is_at_least_the_current_run_and_the_prior_is_6_hours() -> None:
    task = DeadlineTask(10.0, 20.0, 0.2)
    # a: one 1-h run, then up for the last 8 h: mean (1 + 6) / 2 = 3.5 h, the current run 8 h
    hist = np.array([[1, 0, 1, 1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]], dtype=bool)
    pol = SpotplaneMultiZone(task, tick_hours=1.0, history=hist, zone_names=NAMES)
    assert pol.prior_run_hours == 6.0
    assert pol.expected_run("a") == pytest.approx(8.0)
    assert pol.expected_run("b") == pytest.approx(6.0)  # no run seen: the default prior alone


def test_eager_failover_is_made_by_name_for_the_given_task() -> None:
    task = DeadlineTask(10.0, 14.0, 0.2)
    pol = make_policy("up_eager_failover", task, tick_hours=0.25)
    assert isinstance(pol, EagerFailover)
    assert (pol.task, pol.tick_hours) == (task, 0.25)


def test_spotplane_migrates_only_when_the_target_zones_own_runs_pay_for_the_move() -> None:
    """On spot in a ($1/h), b at $0.9/h up for 1 h, d = 0.2 h: a move pays when E[run_b] x 0.1 >
    0.2 x 1.9 = 0.38. With b's record of ten 1-h runs E[run_b] = (10 + 6) / 11 = 1.45 h (saving
    0.145): stay; with no record, the 6-h prior (saving 0.6): move."""
    task = DeadlineTask(4.0, 20.0, 0.2)
    zones = (ZoneView("a", True, 1.0, 3.0), ZoneView("b", True, 0.9, 3.0))
    where = []
    for runs_b in ([10.0, 10.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0]):
        pol = SpotplaneMultiZone(task, tick_hours=0.1)
        pol.load_state_dict({"name": "spotplane", "runs": {"a": [0.0, 0.0, 1.0, 1.0], "b": runs_b},
                             "last_t": 2.0})
        act = pol.decide(Observation(2.0, 1.0, Kind.SPOT, "a", True, zones))
        where.append((act.kind, act.zone))
    assert where == [(Kind.SPOT, "a"), (Kind.SPOT, "b")]
