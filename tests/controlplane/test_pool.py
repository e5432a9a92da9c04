"""The placement pool's snapshot of one accelerator (``controlplane.reconcile.pool``): what the
GFS scheduler sees, built once per tick and patched after each placement in the same tick."""

from __future__ import annotations

import numpy as np

from controlplane.core.models import Job, JobKind, JobSpec, Market, Node, NodeState
from controlplane.reconcile.pool import PlacementPlan, Pool, lifetime_key


def _job(i: str, kind: str) -> Job:
    return Job(id=i, tenant_id="t", name=i, kind=JobKind(kind), submitted_at=0.0,
               spec=JobSpec(name=i, kind=kind, compute_hours=1, accelerator="V100"))


def _node(i: int, job_id: str | None) -> Node:
    return Node(id=f"n{i}", provider="sim", cloud="aws", zone="z", instance_type="p3.2xlarge",
                accelerator="V100", accelerator_count=1, market=Market.SPOT, price_per_hour=1.0,
                on_demand_price_per_hour=3.0, state=NodeState.READY, intent_id=f"i{i}",
                requested_at=0.0, launched_at=0.0, job_id=job_id)


def test_snapshot_skips_a_job_it_does_not_know_and_keeps_the_ones_after_it() -> None:
    """n0 holds a job the loop has forgotten, n1 and n2 a spot job, n3 an HP job; 5 slots."""
    spot, hp = _job("s", "spot"), _job("h", "hp")
    pool = Pool("V100", 5, [_node(0, "gone"), _node(1, "s"), _node(2, "s"), _node(3, "h")])
    snap, slots = pool.snapshot({"s": spot, "h": hp}, 100.0)
    assert slots == ["n0", "n1", "n2", "n3", None]
    assert sorted(snap.running) == ["h", "s"]
    assert snap.spot_allocated == 2.0
    assert snap.card_free[:, 0].tolist() == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert (snap.spot_gpus.tolist(), snap.hp_gpus.tolist()) == (
        [0.0, 1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 1.0, 0.0])


def test_commit_evicts_a_spot_victim_and_places_an_hp_job_on_the_snapshot() -> None:
    """The HP job h2 evicts the spot job s (on n0, n1) and takes slot 1 and the empty slot 2 on
    new nodes; n0's slot stays taken until its node is gone."""
    spot, h2 = _job("s", "spot"), _job("h2", "hp")
    pool = Pool("V100", 3, [_node(0, "s"), _node(1, "s")])
    snap, _ = pool.snapshot({"s": spot}, 100.0)
    assert snap.spot_allocated == 2.0
    plan = PlacementPlan("h2", "V100", launch=2, victims=("s",), slots=(1, 2),
                         launch_slots=(1, 2))
    pool.commit(plan, h2, {1: "n8", 2: "n9"}, 160.0)
    snap, slots = pool.snapshot({"s": spot, "h2": h2}, 160.0)
    assert slots == [None, "n8", "n9"]
    assert sorted(snap.running) == ["h2"] and snap.running["h2"].priority == "hp"
    assert snap.spot_allocated == 0.0
    assert snap.card_free[:, 0].tolist() == [0.0, 0.0, 0.0]
    assert (snap.hp_gpus.tolist(), snap.spot_gpus.tolist()) == ([0.0, 1.0, 1.0], [0.0] * 3)


def test_commit_of_a_spot_job_counts_its_slots_as_spot() -> None:
    spot = _job("s", "spot")
    pool = Pool("V100", 2, [])
    pool.snapshot({}, 0.0)
    pool.commit(PlacementPlan("s", "V100", launch=2, slots=(0, 1), launch_slots=(0, 1)), spot,
                {0: "n0", 1: "n1"}, 10.0)
    snap, slots = pool.snapshot({"s": spot}, 10.0)
    assert slots == ["n0", "n1"] and snap.spot_allocated == 2.0
    assert (snap.spot_gpus.tolist(), snap.hp_gpus.tolist()) == ([1.0, 1.0], [0.0, 0.0])
    assert snap.running["s"].priority == "spot" and snap.running["s"].pods == 2


def test_ages_key_spot_vms_by_cloud_on_demand_by_nothing_and_a_placement_takes_its_slots() -> None:
    """Idle ready VMs launched at 0 are 2 h old at 7200 s; the on-demand one's lifetime model
    is '' (never preempted). Once a job takes slot 0 the reuse policy no longer sees it idle."""
    on_demand = _node(2, None).model_copy(update={"market": Market.ON_DEMAND})
    pool = Pool("V100", 4, [_node(0, None), _node(1, None), on_demand])
    assert [lifetime_key(n) for n in pool.nodes] == ["aws", "aws", ""]
    snap, _ = pool.snapshot({}, 7200.0)
    assert snap.ages is not None
    assert snap.ages.model.tolist() == ["aws", "aws", "", ""] and snap.ages.fresh == "aws"
    assert np.array_equal(snap.ages.hours, [2.0, 2.0, 2.0, np.nan], equal_nan=True)
    spot = _job("s", "spot")
    pool.commit(PlacementPlan("s", "V100", reuse=("n0",), slots=(0,)), spot, {}, 7200.0)
    snap, _ = pool.snapshot({"s": spot}, 7200.0)
    assert snap.ages is not None
    assert np.array_equal(snap.ages.hours, [np.nan, 2.0, 2.0, np.nan], equal_nan=True)
    assert snap.ages.model.tolist() == ["aws", "aws", "", ""]


def test_a_running_jobs_waste_is_its_work_since_its_last_checkpoint() -> None:
    """Eq. 17 on the snapshot: s started at 1,000 s, has 2.0 h done and 1.5 h checkpointed, so
    at 10,000 s its last checkpoint is 0.5 h back (8,200 s) and an eviction loses 1,800
    GPU-seconds on each of its 2 nodes; h, started at 0 with everything saved, loses none."""
    spot, hp = _job("s", "spot"), _job("h", "hp")
    spot.started_at, spot.progress_hours, spot.checkpointed_hours = 1000.0, 2.0, 1.5
    hp.started_at, hp.progress_hours, hp.checkpointed_hours = 0.0, 1.0, 1.0
    pool = Pool("V100", 3, [_node(0, "s"), _node(1, "s"), _node(2, "h")])
    snap, _ = pool.snapshot({"s": spot, "h": hp}, 10_000.0)
    s, h = snap.running["s"], snap.running["h"]
    assert (s.started_s, s.last_checkpoint_s(10_000.0), s.waste(10_000.0)) == (1000.0, 8200.0, 3600.0)
    assert (h.last_checkpoint_s(10_000.0), h.waste(10_000.0)) == (10_000.0, 0.0)
