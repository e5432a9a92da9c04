"""The egress-aware deadline policy in the live reconcile loop (no Ray): a deadline job on two
regions moves for a small spot price gap only when the egress of its checkpoint does not outweigh
what the move saves."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusters.fleet import (
    InstanceState,
    Offer,
)
from controlplane.core.clock import SimClock
from controlplane.core.models import Job, JobSpec, JobState, Market
from controlplane.core.units import HOUR
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.reconcile.policies import move_bytes
from controlplane.reconcile.policyhost import default_policy, live_policies
from controlplane.store import Store
from policies.deadline import DeadlineTask, Kind, Observation, ZoneView
from policies.egressaware import EgressAwareSpotplane
from tests.controlplane.keptfleet import KeptFleet

EAST, WEST = "us-east-1a", "us-west-2a"
OFFERS = [  # a small gap: west's spot is 10 % cheaper, a region away
    Offer("aws", EAST, "p3.2xlarge", "V100", 1, spot_price=1.00, on_demand_price=3.06,
          region="us-east-1"),
    Offer("aws", WEST, "p3.2xlarge", "V100", 1, spot_price=0.90, on_demand_price=3.06,
          region="us-west-2"),
]


class TwoRegionFleet(KeptFleet):
    """Two zones in two regions, every zone's spot in one call; launches boot at once and west's
    spot is down until the test raises it."""

    name = "two-regions"

    def __init__(self, clock: SimClock) -> None:
        super().__init__(clock, OFFERS, boot_state=InstanceState.RUNNING)
        self.spot_up[WEST] = False

    def spot_availability(self) -> dict[str, bool]:
        return dict(self.spot_up)


def _run(ctl: Controller, clock: SimClock, hours: float, dt: float = 60.0) -> None:
    for _ in range(int(hours * HOUR / dt)):
        clock.advance(dt)
        ctl.tick()


def _live_job(tmp: Path, checkpoint_gb: float) -> tuple[Store, Job]:
    """A deadline job that starts on spot in the east; the west's cheaper spot comes up an hour
    later and stays up."""
    clock = SimClock(start=0.0)
    store = Store(tmp / "spotplane.db")
    fleet = TwoRegionFleet(clock)
    ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"V100": 4}),
                     epoch=store.take_controller_lease())
    t, _ = store.create_tenant("t", max_gpus=100)
    job = store.submit_job(t.id, JobSpec(name="d", kind="deadline", compute_hours=6.0,
                                         deadline_hours=20.0, accelerator="V100",
                                         checkpoint_gb=checkpoint_gb), now=0.0)
    _run(ctl, clock, 1.0)
    assert store.get_job(job.id).zone == EAST
    fleet.spot_up[WEST] = True
    _run(ctl, clock, 2.0)
    return store, store.get_job(job.id)


def test_a_small_price_gap_does_not_move_a_job_whose_egress_outweighs_it(tmp_path: Path) -> None:
    store, job = _live_job(tmp_path, checkpoint_gb=200.0)  # $4 of egress against ~$0.6 saved
    assert job.state in (JobState.RUNNING, JobState.CHECKPOINTING) and job.zone == EAST
    assert job.preemptions == 0 and job.attempts == 1
    policies = {d.policy for d in store.job_decisions(job.id) if d.policy != "gfs"}
    assert policies == {"spotplane_egress"}  # the default on zones of two regions


def test_the_same_gap_moves_a_job_whose_egress_is_small(tmp_path: Path) -> None:
    store, job = _live_job(tmp_path, checkpoint_gb=1.0)  # $0.02 of egress
    assert job.zone == WEST and job.market is Market.SPOT and job.attempts == 2
    moves = [d for d in store.job_decisions(job.id) if d.policy == "spotplane_egress"
             and d.zone == WEST]
    assert moves


def test_the_default_is_egress_aware_only_across_regions() -> None:
    assert default_policy(2, regions=2) == "spotplane_egress"
    assert default_policy(13) == "spotplane" and default_policy(1, regions=2) == "uniform_progress"
    assert default_policy(13, evidence=True, regions=8) == "spotplane_probing"
    assert "spotplane_egress" in live_policies()


def test_a_move_carries_the_last_checkpoint_else_the_estimate(tmp_path: Path) -> None:
    spec = JobSpec(name="d", kind="deadline", compute_hours=1.0, deadline_hours=4.0,
                   checkpoint_gb=2.5)
    job = Job(id="j", tenant_id="t", name="d", kind=spec.kind, spec=spec, submitted_at=0.0)
    assert move_bytes(job) == 2_500_000_000
    job.last_checkpoint_bytes = 123
    assert move_bytes(job) == 123
    bare = Job(id="k", tenant_id="t", name="d", kind=spec.kind,
               spec=spec.model_copy(update={"checkpoint_gb": None}), submitted_at=0.0)
    assert move_bytes(bare) is None


def test_the_policy_learns_places_and_bytes_from_the_observation_and_keeps_them() -> None:
    task = DeadlineTask(4.0, 20.0, 0.1, on_demand_price=3.06, spot_price=1.0)
    policy = EgressAwareSpotplane(task, tick_hours=1 / 60)
    views = tuple(ZoneView(o.zone, True, o.spot_price, o.on_demand_price, o.cloud, o.region)
                  for o in OFFERS)
    policy.decide(Observation(0.1, 0.0, Kind.SPOT, EAST, True, views, 10**10))
    assert policy.egress(WEST) == pytest.approx(0.2) and policy.egress(EAST) == 0.0
    again = EgressAwareSpotplane(task, tick_hours=1 / 60)
    again.load_state_dict(policy.state_dict())
    again.decide(Observation(0.2, 0.1, Kind.IDLE, None, True, views, 10**10))
    assert again.egress(WEST) == pytest.approx(0.2)  # the checkpoint is still in the east


def test_an_on_demand_run_starts_where_price_plus_egress_over_the_work_left_is_least() -> None:
    task = DeadlineTask(4.0, 4.2, 0.1, on_demand_price=3.0, spot_price=1.0)
    views = (ZoneView(EAST, False, 1.0, 3.06, "aws", "us-east-1"),
             ZoneView(WEST, False, 0.9, 3.00, "aws", "us-west-2"))
    for gb, zone in ((100.0, EAST), (0.0, WEST)):  # $2 over 3.9 h left beats 6 cents an hour
        policy = EgressAwareSpotplane(task, tick_hours=1 / 60)
        policy.decide(Observation(0.05, 0.05, Kind.SPOT, EAST, True, views, int(gb * 1e9)))
        act = policy.decide(Observation(0.15, 0.1, Kind.IDLE, None, False, views, int(gb * 1e9)))
        assert (act.kind, act.zone) == (Kind.ON_DEMAND, zone)
