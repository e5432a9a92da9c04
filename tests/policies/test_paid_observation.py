"""Paid observation (``policies.paid_observation``): zones are learned by running, refused
launches and bought probes; exact costs on a hand-made three-zone window."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from policies.deadline import Action, DeadlineTask, Kind, Observation, ZoneView
from policies.paid_observation import ProbingSpotplane, simulate_zones_paid

NAMES = ("a", "b", "c")
SPOT = (1.0, 2.0, 3.0)
OD = (10.0, 10.0, 10.0)
# zone a has no spot for the first two hours; b and c always have it
UP = np.array([[False, False, True, True], [True] * 4, [True] * 4])


class CheapestBelieved:
    """Spot in the cheapest zone it believes up; probes the cheapest zone it believes down."""

    def __init__(self, task: DeadlineTask) -> None:
        self.task = task
        self.seen: list[tuple[bool, ...]] = []

    def probes(self, obs: Observation) -> Sequence[str]:
        down = [z for z in obs.zones if not z.spot_available]
        return (min(down, key=lambda z: z.spot_price).zone,) if down else ()

    def decide(self, obs: Observation) -> Action:
        self.seen.append(tuple(z.spot_available for z in obs.zones))
        up = [z for z in obs.zones if z.spot_available]
        return Action(Kind.SPOT, min(up, key=lambda z: z.spot_price).zone)


def test_a_refused_launch_is_free_and_a_probe_costs_a_minute_of_spot() -> None:
    task = DeadlineTask(3.0, 10.0, 0.0, on_demand_price=10.0, spot_price=1.0)
    pol = CheapestBelieved(task)
    r = simulate_zones_paid(pol, UP, 1.0, NAMES, SPOT, OD)  # type: ignore[arg-type]
    # hour 0: a is believed up, its launch is refused, b runs; hour 1: a probed (still down),
    # b runs; hour 2: a probed (back), the job moves there and finishes
    assert pol.seen == [(True, True, True), (False, True, True), (False, True, True),
                        (True, True, True)]
    assert (r.refused_launches, r.probes) == (1, 2)
    assert r.probe_cost == pytest.approx(2 / 60)
    assert r.result.cost == pytest.approx(2.0 + 2.0 + 1.0 + 2 / 60)
    assert (r.result.changeovers, r.result.finish_hours, r.result.met_deadline) == (2, 3.0, True)


def test_spotplane_probes_only_zones_that_would_beat_where_it_runs() -> None:
    task = DeadlineTask(3.0, 10.0, 0.0, on_demand_price=10.0, spot_price=1.0)
    pol = ProbingSpotplane(task, tick_hours=1.0, reprobe_hours=1.0)
    r = simulate_zones_paid(pol, UP, 1.0, NAMES, SPOT, OD)
    assert (r.refused_launches, r.probes, r.result.met_deadline) == (1, 2, True)
    # on b, a (believed down since its refusal) would beat it: probed at hours 1 and 2 (once an
    # hour), c never (dearer than b); a is back at hour 2 but its run is too young to move to
    assert r.result.cost == pytest.approx(3 * 2.0 + 2 / 60)
    assert (r.result.changeovers, r.result.finish_hours) == (1, 3.0)


def test_off_spot_a_zone_believed_down_is_tried_again_by_a_free_launch_not_a_probe() -> None:
    """Hour 0: a and b are down (two refused launches) and the slack lets the job wait; hour 1:
    a is back, and the job, idle, tries it again (believed down for one tick) and runs there."""
    task = DeadlineTask(3.0, 10.0, 0.0, on_demand_price=10.0, spot_price=1.0)
    up = np.array([[False, True, True, True, True], [False, True, True, True, True]])
    r = simulate_zones_paid(ProbingSpotplane(task, tick_hours=1.0), up, 1.0, NAMES[:2],
                            SPOT[:2], OD[:2])
    assert (r.refused_launches, r.probes, r.probe_cost) == (2, 0, 0.0)
    assert r.result.cost == pytest.approx(3 * 1.0)
    assert (r.result.changeovers, r.result.finish_hours, r.result.met_deadline) == (1, 4.0, True)


def test_a_zone_refused_at_this_step_is_not_shown_up_again_at_once() -> None:
    """With a retry after 0 h, a refused zone still waits for the next step (no endless retry).
    Behind uniform progress at hour 1, the job runs that hour on demand, then moves to a."""
    task = DeadlineTask(3.0, 10.0, 0.0, on_demand_price=10.0, spot_price=1.0)
    up = np.array([[False, False, True, True, True, True], [False] * 6])
    r = simulate_zones_paid(ProbingSpotplane(task, tick_hours=1.0, retry_hours=0.0), up, 1.0,
                            NAMES[:2], SPOT[:2], OD[:2])
    assert r.refused_launches == 2 + 2 and r.probes == 0  # both at hours 0 and 1
    assert (r.result.cost, r.result.finish_hours) == (pytest.approx(10.0 + 2 * 1.0), 4.0)


def test_bad_probe_minutes_are_refused() -> None:
    task = DeadlineTask(3.0, 10.0, 0.0, on_demand_price=10.0, spot_price=1.0)
    with pytest.raises(ValueError, match="probe_minutes: must be >= 0"):
        simulate_zones_paid(ProbingSpotplane(task), UP, 1.0, NAMES, SPOT, OD, probe_minutes=-1)


class Scripted:
    """Takes the actions it is given, one a tick (no probes)."""

    def __init__(self, task: DeadlineTask, actions: Sequence[Action]) -> None:
        self.task, self.actions = task, list(actions)

    def decide(self, obs: Observation) -> Action:
        return self.actions[round(obs.elapsed_hours)]


def test_an_on_demand_tick_is_billed_at_the_zones_on_demand_price_times_the_nodes() -> None:
    """A 2-node gang, C = 3 h, d = 0.5 h: on demand in c for two hours (14 $/node-h), then spot
    in a once it is back (1 $/node-h): 2 x 14 + 2 x 14 + 2 x 1 + 2 x 1 = 60 $, done at 4.0 h."""
    task = DeadlineTask(3.0, 10.0, 0.5, on_demand_price=10.0, spot_price=1.0, nodes=2)
    od, spot = Action(Kind.ON_DEMAND, "c"), Action(Kind.SPOT, "a")
    r = simulate_zones_paid(Scripted(task, [od, od, spot, spot]), UP, 1.0, NAMES,  # type: ignore[arg-type]
                            SPOT, (10.0, 12.0, 14.0))
    assert r.result.cost == pytest.approx(60.0, abs=1e-12)
    assert (r.result.od_billed_hours, r.result.od_hours) == (pytest.approx(2.0), pytest.approx(1.5))
    assert (r.result.spot_billed_hours, r.result.spot_hours) == (pytest.approx(2.0), pytest.approx(1.5))
    assert (r.result.changeovers, r.result.finish_hours, r.refused_launches, r.probes) == (2, 4.0, 0, 0)


def _views(up: Sequence[bool]) -> tuple[ZoneView, ...]:
    return tuple(ZoneView(n, u, s, o) for n, u, s, o in zip(NAMES, up, SPOT, OD, strict=True))


@pytest.mark.parametrize(("deadline", "probes"), [(3.5, ("c",)), (10.0, ())])
def test_idle_after_a_refusal_a_live_policy_probes_the_other_zones_when_slack_is_short(
        deadline: float, probes: tuple[str, ...]) -> None:
    """``probe_idle`` (what a live controller sets, where a refusal shows a tick late): zone a was
    tried at hour 0 and shows down at hour 0.1; the policy tries b by a launch and, with 0.6 h of
    slack (under a quarter of C = 3 h), buys a probe of c instead of learning it a tick later by
    another refused launch. With 7.1 h of slack it waits and learns by launches."""
    task = DeadlineTask(3.0, deadline, 0.0, on_demand_price=10.0, spot_price=1.0)
    pol = ProbingSpotplane(task, tick_hours=0.1, retry_hours=1.0, probe_idle=True)
    first = pol.decide(Observation(0.0, 0.0, Kind.IDLE, None, True, _views((True,) * 3)))
    assert first == Action(Kind.SPOT, "a")
    obs = Observation(0.1, 0.0, Kind.IDLE, None, False, _views((False, True, True)))
    assert pol.decide(obs) == Action(Kind.SPOT, "b")
    assert tuple(pol.probes(obs)) == probes
    assert tuple(pol.probes(replace(obs, elapsed_hours=0.2))) == ()  # only right after a refusal


def test_what_the_probing_policy_learnt_survives_a_restart_through_its_json_state() -> None:
    """A controller restarts the policy from ``state_dict`` (stored as JSON): the copy knows
    zone a was refused at hour 0.0 and probed at 0.1, so it makes the same next decisions and
    probes as the original, where a fresh policy would try a again and probe it again."""
    task = DeadlineTask(3.0, 3.5, 0.0, on_demand_price=10.0, spot_price=1.0)
    kw = {"tick_hours": 0.1, "retry_hours": 1.0, "probe_idle": True, "reprobe_hours": 2.0}
    pol = ProbingSpotplane(task, **kw)
    pol.decide(Observation(0.0, 0.0, Kind.IDLE, None, True, _views((True,) * 3)))
    obs = Observation(0.1, 0.0, Kind.IDLE, None, False, _views((False, True, True)))
    pol.decide(obs)
    assert tuple(pol.probes(obs)) == ("c",)
    copy = ProbingSpotplane(task, **kw)
    copy.load_state_dict(json.loads(json.dumps(pol.state_dict())))
    assert copy.state_dict() == pol.state_dict()
    later = Observation(0.2, 0.1, Kind.SPOT, "b", True, _views((False, True, False)))
    assert copy.decide(later) == pol.decide(later) == Action(Kind.SPOT, "b")
    assert tuple(copy.probes(later)) == tuple(pol.probes(later)) == ("a",)
    assert copy.state_dict()["down_since"] == {"a": 0.1, "c": 0.2}
    fresh = ProbingSpotplane(task, **kw)
    assert fresh.state_dict()["probed"] == {} and fresh.state_dict()["tried"] == [-1.0, None]
