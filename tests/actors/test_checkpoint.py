"""The checkpoint actor's logic (DP schedule, measured cost, re-plan on restore, notices)."""

from __future__ import annotations

from typing import Any

import pytest

from actors.checkpoint import (
    CheckpointCoordinator,
    actor_name,
    checkpoint_actor_options,
    plan_checkpoints,
)
from controlplane.core.clock import SimClock
from controlplane.core.errors import InvalidInput
from policies.preemption import default_gce_model

MODEL = default_gce_model()


def coordinator(clock: SimClock, **kw: Any) -> CheckpointCoordinator:
    args: dict[str, Any] = dict(
        work_hours=5.0, model=MODEL, checkpoint_hours=1 / 60, hours_per_second=1 / 3600, clock=clock
    )
    args.update(kw)
    return CheckpointCoordinator("job-1", "r0", **args)


def ref(progress: float, seq: int = 1) -> dict[str, Any]:
    return {
        "job_id": "job-1",
        "replica_id": "r0",
        "progress": progress,
        "seq": seq,
        "sha256": "x" * 64,
        "size": 10,
        "t": 0.0,
    }


def test_plan_follows_the_bathtub_dp_schedule() -> None:
    """Seed 001, Sec. 4.3: a 5 h job on a new VM checkpoints often early, less often later."""
    plan = plan_checkpoints(MODEL, 5.0, 0.0, 1 / 60)
    gaps = [b - a for a, b in zip((0.0, *plan), plan, strict=False)]
    assert 3 <= len(plan) <= 12
    assert gaps[0] < gaps[-1]  # failure rate falls with age: intervals grow
    assert all(0 < c < 5.0 for c in plan)
    # an old VM near the 24 h limit checkpoints before the deadline kill
    late = plan_checkpoints(MODEL, 5.0, 21.0, 1 / 60)
    assert late and late[0] < 3.0


def test_directive_gives_the_next_planned_progress() -> None:
    c = coordinator(SimClock())
    first = c.plan[0]
    d = c.directive(0.0)
    assert not d["checkpoint_now"] and d["next_at_progress"] == pytest.approx(first / 5.0)
    d = c.directive(first / 5.0 + 1e-6)  # past it: the following one
    assert d["next_at_progress"] == pytest.approx(c.plan[1] / 5.0)


def test_first_save_is_measured_and_a_different_cost_replans() -> None:
    clock = SimClock()
    c = coordinator(clock)
    assert c.checkpoint_cost_hours == pytest.approx(1 / 60)
    plans, first_plan = c.plans, c.plan
    c.directive(0.1)
    c.record_save(ref(0.1), seconds=600.0)  # 10 min, not the 1 min prior
    assert c.checkpoint_cost_hours == pytest.approx(600 / 3600)
    assert c.plans == plans + 1 and c.plan != first_plan
    assert len(c.plan) < len(first_plan)  # dearer checkpoints: fewer of them
    c.record_save(ref(0.2, 2), seconds=660.0)  # running mean 630 s: within 25%, no re-plan
    assert c.checkpoint_cost_hours == pytest.approx(630 / 3600) and c.plans == plans + 1
    assert [a["progress"] for a in c.status()["artifacts"]] == [0.1, 0.2]


def test_restore_replans_from_the_new_vms_age() -> None:
    clock = SimClock()
    c = coordinator(clock, node_age_hours=20.0)
    old_plan = c.plan
    c2 = coordinator(clock, node_age_hours=0.0)
    c2.record_restore(ref(0.4))
    assert c2.progress == 0.4 and c2.base == 0.4 and c2.status()["restored_from"]["progress"] == 0.4
    assert c2.plan == plan_checkpoints(MODEL, 3.0, 0.0, 1 / 60)
    assert c2.next_at_progress() == pytest.approx(0.4 + c2.plan[0] / 5.0)
    assert old_plan != plan_checkpoints(MODEL, 5.0, 0.0, 1 / 60)  # the old node's age mattered


def test_emergency_checkpoint_with_30s_notice_and_5s_checkpoint_loses_no_step() -> None:
    """A job of 1 s steps; notice 30 s before the node dies; each checkpoint takes 5 s."""
    clock = SimClock(start=1000.0)
    steps = 3600
    c = coordinator(clock, work_hours=1.0)
    done = 0
    notice_at, death_at = 1000.0 + 1234.5, 1000.0 + 1234.5 + 30.0
    noticed = False
    saves: list[float] = []
    while clock.now() < death_at:
        if not noticed and clock.now() >= notice_at:
            c.notice(30.0)
            noticed = True
        d = c.directive(done / steps)
        if d["checkpoint_now"] or (
            d["next_at_progress"] is not None and done / steps >= d["next_at_progress"]
        ):
            clock.advance(5.0)  # the save takes 5 s
            if clock.now() > death_at:
                break
            answer = c.record_save(ref(done / steps, len(saves) + 1), seconds=5.0)
            saves.append(clock.now())
            if answer["hold_seconds"] > 0:
                clock.advance(answer["hold_seconds"])  # nothing more to do on this node
                continue
        clock.advance(1.0)  # one step of work
        done += 1
        c.directive(done / steps)
    outcome = c.node_lost(at=death_at)
    assert outcome["noticed"] and outcome["completed_before_death"]
    assert outcome["checkpoint_completed_at"] - outcome["checkpoint_requested_at"] <= 6.0
    assert outcome["lost_progress"] < 1 / steps  # less than one step
    reasons = [a["reason"] for a in c.status()["artifacts"]]
    assert reasons[-1] == "preemption notice" and reasons.count("preemption notice") == 1, reasons


def test_a_notice_too_short_for_the_checkpoint_is_reported_as_missed() -> None:
    clock = SimClock()
    c = coordinator(clock)
    c.directive(0.3)
    c.notice(2.0)
    assert c.directive(0.3)["checkpoint_now"]
    out = c.node_lost(at=clock.now() + 2.0)  # died before any save completed
    assert (
        out["noticed"]
        and not out["completed_before_death"]
        and out["lost_progress"] == pytest.approx(0.3)
    )


def test_peer_loss_requests_a_checkpoint_once() -> None:
    c = coordinator(SimClock())
    c.request_checkpoint("peer r1 lost")
    d = c.directive(0.2)
    assert d["checkpoint_now"] and d["reason"] == "peer r1 lost"
    c.record_save(ref(0.2), seconds=1.0)
    assert not c.directive(0.2)["checkpoint_now"]
    c.record_save(ref(0.4), seconds=1.0)
    # each artifact says what asked for it: the lost peer's request once, then the DP schedule
    assert [a["reason"] for a in c.status()["artifacts"]] == ["peer r1 lost", "dp schedule"]


def test_options_pin_to_the_node_resource_and_bad_input_is_refused() -> None:
    opts = checkpoint_actor_options("j", "r0", "ns", "spotplane_slot:3")
    assert opts["resources"] == {"spotplane_slot:3": 0.001} and opts["name"] == actor_name(
        "j", "r0"
    )
    assert "resources" not in checkpoint_actor_options("j", "r0", "ns", None)
    with pytest.raises(InvalidInput, match="work_hours"):
        CheckpointCoordinator("j", "r0", work_hours=0.0)
