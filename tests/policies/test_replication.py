"""The adaptive replication rule: replicate only while the time it saves is worth the instance."""

from __future__ import annotations

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
