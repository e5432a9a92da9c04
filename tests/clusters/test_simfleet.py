"""The simulated fleet replays the real traces: availability, refusals, notices, preemptions,
idempotent launches that survive a restart, GCP's 24 h cap, determinism."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from clusters.data.catalog import DataCatalog
from clusters.fleet import EventKind, InstanceState, LaunchRequest
from clusters.sim import AWS_COLLECTION, SimulatedFleet
from controlplane.core.clock import SimClock
from controlplane.core.errors import CapacityUnavailable
from controlplane.core.models import Market
from policies.preemption import default_gce_model


def _fleet(data_root: Path, clock: SimClock, **kw: object) -> SimulatedFleet:
    """The fleet as the control plane assembles it: GCP lifetimes from seed 001's GCE fit."""
    return SimulatedFleet.from_options(clock=clock, data_dir=data_root,
                                       lifetime_model=default_gce_model(), **kw)


def test_offers_cover_both_clouds_with_trace_prices(data_root: Path) -> None:
    f = _fleet(data_root, SimClock())
    offers = {o.zone: o for o in f.offers()}
    assert len(offers) == 9 + 13
    assert offers["us-west-2a"].instance_type == "p3.2xlarge" and offers["us-west-2a"].cloud == "aws"
    h100 = offers["us-east4-a"]
    assert (h100.accelerator, h100.accelerator_count) == ("H100", 8)
    assert h100.spot_price == pytest.approx(14.85344) and h100.on_demand_price == pytest.approx(82.52543712)


def test_availability_replays_the_aws_trace(catalog: DataCatalog, data_root: Path) -> None:
    clock = SimClock()
    f = _fleet(data_root, clock, gcp=False)
    trace = next(t for t in catalog.spot_traces(AWS_COLLECTION) if t.zone == "us-east-1a")
    seen = []
    for i in range(0, 2000, 7):
        clock.set(i * trace.gap_seconds + 1.0)
        seen.append((f.spot_available("us-east-1a", "p3.2xlarge"), bool(trace.available[i] >= 1)))
    got, want = np.array(seen).T
    assert (got == want).all() and want.any() and not want.all()


def test_launch_refused_without_spot_and_remembered_across_restarts(data_root: Path,
                                                                     tmp_path: Path) -> None:
    """Idempotency within one process: test_conformance; here, across a restart."""
    clock = SimClock()
    f = _fleet(data_root, clock, gcp=False, state_path=tmp_path / "fleet.db", seed=7)
    down = [z for z, up in f.spot_availability().items() if not up]
    up = [z for z, ok in f.spot_availability().items() if ok]
    assert down and up
    with pytest.raises(CapacityUnavailable, match="no spot"):
        f.launch(LaunchRequest("i-1", down[0], "p3.2xlarge", Market.SPOT))
    od = f.launch(LaunchRequest("i-2", down[0], "p3.2xlarge", Market.ON_DEMAND, count=2))
    assert len(od) == 2 and all(i.state is InstanceState.PENDING for i in od)
    f.launch(LaunchRequest("i-2", down[0], "p3.2xlarge", Market.ON_DEMAND, count=2))
    # a new process on the same state file: the cloud remembers
    f2 = _fleet(data_root, clock, gcp=False, state_path=tmp_path / "fleet.db", seed=7)
    third = f2.launch(LaunchRequest("i-2", down[0], "p3.2xlarge", Market.ON_DEMAND, count=2))
    assert [i.instance_id for i in third] == [i.instance_id for i in od]
    assert f2.instances_per_intent() == {"i-2": 2} and f2.launch_calls["i-2"] == 3
    with pytest.raises(CapacityUnavailable):
        f2.launch(LaunchRequest("i-1", down[0], "p3.2xlarge", Market.SPOT))


def test_notice_then_preemption_at_the_trace_drop(catalog: DataCatalog, data_root: Path) -> None:
    clock = SimClock()
    f = _fleet(data_root, clock, gcp=False)
    trace = next(t for t in catalog.spot_traces(AWS_COLLECTION) if t.zone == "us-east-2a")
    start = int(np.flatnonzero(trace.available >= 1)[0])
    drop = start + int(np.flatnonzero(trace.available[start:] < 1)[0])
    clock.set(start * trace.gap_seconds)
    (inst,) = f.launch(LaunchRequest("a", "us-east-2a", "p3.2xlarge", Market.SPOT))
    clock.set(drop * trace.gap_seconds + 10)
    events = [e for e in f.poll_events() if e.instance_id == inst.instance_id]
    kinds = [e.kind for e in events]
    assert kinds == [EventKind.READY, EventKind.PREEMPTION_NOTICE, EventKind.PREEMPTED]
    notice, pre = events[1], events[2]
    assert pre.at == pytest.approx(drop * trace.gap_seconds)
    assert pre.at - notice.at == pytest.approx(120.0) and notice.seconds_left == pytest.approx(120.0)
    assert f.describe([inst.instance_id])[0].state is InstanceState.PREEMPTED
    assert f.preemptions == {"zone outage": 1}


def test_gcp_spot_lifetimes_capped_and_deterministic(data_root: Path) -> None:
    def lifetimes(seed: int) -> list[float]:
        clock = SimClock()
        f = _fleet(data_root, clock, seed=seed, zones=["us-central1-a"], spot_capacity=500)
        f.launch(LaunchRequest("x", "us-central1-a", "a3-highgpu-8g", Market.SPOT, count=40))
        clock.advance(48 * 3600)
        ev = f.poll_events()
        notices = {e.instance_id: e for e in ev if e.kind is EventKind.PREEMPTION_NOTICE}
        pre = {e.instance_id: e.at for e in ev if e.kind is EventKind.PREEMPTED}
        assert all(pre[i] - n.at == pytest.approx(30.0) for i, n in notices.items())
        return sorted(pre.values())

    a, b, c = lifetimes(1), lifetimes(1), lifetimes(2)
    assert a == b and a != c
    assert len(a) == 40 and max(a) <= 24 * 3600 + 1e-6
    assert np.median(a) < 20 * 3600  # the bathtub's early failures show


@pytest.mark.parametrize(("zone", "counts", "outage_hours"), [
    ("europe-west1-c", {"lifetime": 18, "24 h stop": 22}, None),
    ("us-east4-a", {"lifetime": 16, "zone outage": 24}, 18.33),
])
def test_gcp_spot_deaths_are_counted_by_cause(data_root: Path, zone: str, counts: dict[str, int],
                                              outage_hours: float | None) -> None:
    """40 VMs launched at 0 (seed 1): each dies at the first of its drawn lifetime, Google's
    24 h stop and its zone's next outage (europe-west1-c has none in 24 h; us-east4-a's takes
    the 24 VMs still alive at 18.33 h at once), and the fleet counts them by that cause."""
    clock = SimClock()
    f = _fleet(data_root, clock, seed=1, zones=[zone], spot_capacity=500)
    f.launch(LaunchRequest("x", zone, "a3-highgpu-8g", Market.SPOT, count=40))
    clock.advance(48 * 3600)
    pre = [e.at / 3600 for e in f.poll_events() if e.kind is EventKind.PREEMPTED]
    assert f.preemptions == counts and len(pre) == 40
    last = 24.0 if outage_hours is None else outage_hours
    assert sum(1 for t in pre if t == pytest.approx(last, abs=0.005)) == 40 - counts["lifetime"]
    assert max(pre) == pytest.approx(last, abs=0.005)
