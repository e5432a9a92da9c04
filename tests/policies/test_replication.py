"""The adaptive replication rule: replicate only while the time it saves is worth the instance."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controlplane.core.errors import InvalidInput
from policies.replication import (
    ReplicationInputs,
    decide,
    hours_saved_per_hour,
    recovery_hours,
    urgency,
)

BASE = dict(
    hazard_per_hour=0.5,
    unsaved_hours=0.25,
    restart_hours=0.3,
    remaining_work_hours=20.0,
    spot_price=0.92,
    second_price=0.92,
    on_demand_price=3.06,
    survivor_checkpoint_hours=1 / 60,
)


def inputs(**kw: float | None) -> ReplicationInputs:
    return ReplicationInputs(**{**BASE, **kw})  # type: ignore[arg-type]


def test_saving_rate_by_hand() -> None:
    x = inputs(wait_hours=0.2, restart_survival=0.5, peer_survival=0.8)
    assert recovery_hours(x) == pytest.approx((0.3 + 0.2) / 0.5)
    assert hours_saved_per_hour(x) == pytest.approx(0.8 * 0.5 * (0.25 + 1.0 - 1 / 60))


def test_urgency_is_zero_without_deadline_and_one_without_slack() -> None:
    assert urgency(inputs(slack_hours=None)) == 0.0
    assert urgency(inputs(slack_hours=0.0)) == 1.0
    assert urgency(inputs(slack_hours=-1.0)) == 1.0
    # D = 20 * 0.5 * (0.25 + 0.3) = 5.5 h of expected delay
    assert urgency(inputs(slack_hours=11.0)) == pytest.approx(0.5)


def test_calm_zone_or_ample_slack_runs_one_replica() -> None:
    assert not decide(inputs(hazard_per_hour=0.05, slack_hours=0.5)).replicate
    d = decide(inputs(hazard_per_hour=1.5, slack_hours=None))
    assert not d.replicate and d.urgency == 0.0 and "<=" in d.reason


def test_stormy_zone_with_a_tight_deadline_replicates() -> None:
    d = decide(inputs(hazard_per_hour=1.5, unsaved_hours=0.5, slack_hours=0.5, wait_hours=0.3))
    assert d.replicate and d.urgency == 1.0
    assert d.saving_per_hour > d.cost_per_hour
    # the same zone with a second replica that is rarely there when needed does not pay
    assert not decide(
        inputs(
            hazard_per_hour=1.5,
            unsaved_hours=0.5,
            slack_hours=0.5,
            wait_hours=0.3,
            peer_survival=0.1,
        )
    ).replicate


def test_hysteresis_keeps_a_running_replica_that_a_new_one_would_not_clear() -> None:
    # tune the saving to sit inside the band: between 0.9 and 1.1 times the second price
    x = inputs(hazard_per_hour=0.45, unsaved_hours=0.6, slack_hours=0.1, restart_hours=0.3)
    d_keep = decide(x, replicated_now=True)
    d_new = decide(x, replicated_now=False)
    assert 0.9 * 0.92 < d_keep.saving_per_hour < 1.1 * 0.92 / (1 - 0.45 * 0.3)
    assert d_keep.replicate and not d_new.replicate


def test_nothing_left_to_do_never_replicates() -> None:
    assert not decide(
        inputs(hazard_per_hour=5.0, remaining_work_hours=0.0, slack_hours=0.0)
    ).replicate


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("hazard_per_hour", -1.0),
        ("restart_hours", float("nan")),
        ("restart_survival", 0.0),
        ("peer_survival", 1.5),
        ("on_demand_price", 0.5),
    ],
)
def test_bad_inputs_name_the_field(field: str, value: float) -> None:
    with pytest.raises(InvalidInput, match=field):
        inputs(**{field: value})


def test_decision_by_hand_at_half_urgency() -> None:
    """value = (1 - u) c_spot + u (c_od - c_spot); saving = value * s * (1 - lambda R) for a new replica."""
    x = inputs(slack_hours=11.0)  # u = 0.5 (above)
    s = 0.5 * (0.25 + 0.3 - 1 / 60)
    value = 0.5 * 0.92 + 0.5 * (3.06 - 0.92)
    d = decide(x)
    assert (d.hours_saved_per_hour, d.urgency, d.cost_per_hour) == (pytest.approx(s), pytest.approx(0.5), 0.92)
    assert d.saving_per_hour == pytest.approx(value * s * (1 - 0.5 * 0.3), rel=1e-12)
    assert not d.replicate
    assert d.reason == (f"saves {s:.3f} h/h x ${value:.2f}/h (urgency 0.50) = "
                        f"${value * s * 0.85:.3f}/h <= $1.012/h for the second replica")
    kept = decide(x, replicated_now=True)  # no restart discount, threshold 0.9 c2
    assert kept.saving_per_hour == pytest.approx(value * s, rel=1e-12)
    assert not kept.replicate and kept.reason.endswith("<= $0.828/h for the second replica")


def test_the_band_is_checked_and_sets_both_thresholds() -> None:
    x = inputs(hazard_per_hour=1.5, unsaved_hours=0.5, slack_hours=0.5, wait_hours=0.3)
    d = decide(x, band=0.0)
    assert d.replicate and d.reason.endswith("> $0.920/h for the second replica")
    assert decide(x, replicated_now=True, band=0.5).reason.endswith("> $0.460/h for the second replica")
    for band in (1.0, -0.1):
        with pytest.raises(InvalidInput) as bad:
            decide(x, band=band)
        assert (bad.value.field, bad.value.message) == ("band", f"band: must be within [0, 1), got {band}")


def test_a_saving_exactly_at_the_threshold_does_not_replicate() -> None:
    # no deadline: value = spot price 1.0; s = 1.0 * (1.0 + 0 - 0) = 1.0; kept: 1.0 = 0.5 * c2
    x = ReplicationInputs(hazard_per_hour=1.0, unsaved_hours=1.0, restart_hours=0.0,
                          remaining_work_hours=5.0, spot_price=1.0, second_price=2.0,
                          on_demand_price=3.0)
    d = decide(x, replicated_now=True, band=0.5)
    assert d.saving_per_hour == 1.0 and not d.replicate
    assert decide(replace(x, remaining_work_hours=1e-9), replicated_now=True, band=0.6).replicate


def test_a_checkpoint_worth_more_than_the_loss_saves_nothing() -> None:
    """per preemption max(0, L + (R + W) / p - delta): never negative."""
    x = inputs(unsaved_hours=0.0, restart_hours=0.0, survivor_checkpoint_hours=0.5)
    assert hours_saved_per_hour(x) == 0.0
    assert urgency(inputs(slack_hours=1e-9)) == 1.0  # clipped at 1


def test_edge_inputs_that_are_allowed() -> None:
    x = inputs(on_demand_price=0.92, peer_survival=0.0, restart_survival=1.0, wait_hours=0.0)
    assert hours_saved_per_hour(x) == 0.0 and not decide(x).replicate
    with pytest.raises(InvalidInput) as bad:
        inputs(restart_survival=1.5)
    assert bad.value.message == "restart_survival: must be within (0, 1], got 1.5"
    with pytest.raises(InvalidInput) as bad:
        inputs(peer_survival=-0.1)
    assert bad.value.message == "peer_survival: must be within [0, 1], got -0.1"
    with pytest.raises(InvalidInput) as bad:
        inputs(on_demand_price=0.5)
    assert (bad.value.message, bad.value.fix) == (
        "on_demand_price: 0.5 is below the spot price 0.92", "pass the on-demand list price of the same instance type")
    with pytest.raises(InvalidInput) as bad:
        inputs(wait_hours=-1.0)
    assert bad.value.message == "wait_hours: must be >= 0, got -1.0"


def test_urgency_below_one_hour_of_slack_is_still_a_ratio() -> None:
    # D = 1 * 0.5 * (0.25 + 0.3) = 0.275 h of expected delay against 0.55 h of slack
    assert urgency(inputs(remaining_work_hours=1.0, slack_hours=0.55)) == pytest.approx(0.5)


def test_a_finished_job_drops_even_a_replica_that_pays() -> None:
    x = inputs(hazard_per_hour=5.0, remaining_work_hours=0.0, slack_hours=0.0)
    d = decide(x, replicated_now=True)
    assert d.saving_per_hour > d.cost_per_hour and not d.replicate
