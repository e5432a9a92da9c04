"""The loop reads the fleet's catalog again every ``catalog_every_ticks``: the zones of a
workload cluster registered after it started become candidates without a restart, a fleet that
does not answer keeps the catalog it had, and a zone is up when any of its types has spot."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from clusters.clusterfleet import ClusterGatedFleet
from clusters.fleet import Offer
from clusters.sim import SimulatedFleet
from controlplane.core.clock import SimClock
from controlplane.core.errors import CloudError
from controlplane.core.models import JobSpec, JobState
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.store import Store
from policies.preemption import default_gce_model

CENTRAL = ("us-central1-a", "us-central1-b", "us-central1-c")  # the cheapest on-demand H100s
WEST = ("us-west1-a", "us-west1-b")


class ShownFleet(ClusterGatedFleet):
    """The simulated fleet with only the zones ``shown`` in its catalog, as a fleet whose
    clusters are registered one by one; ``down`` makes its catalog fail once."""

    def __init__(self, inner: SimulatedFleet, shown: Sequence[str]) -> None:
        super().__init__(inner, lambda: {o.zone for o in inner.offers()} - set(self.shown))
        self.shown, self.down, self.reads = list(shown), False, 0

    def offers(self) -> list[Offer]:
        self.reads += 1
        if self.down:
            self.down = False
            raise CloudError("the catalog did not answer")
        return [o for o in self.inner.offers() if o.zone in self.shown]


def _world(tmp: Path, data_root: Path, clock: SimClock, shown: Sequence[str]
           ) -> tuple[Store, Controller, ShownFleet]:
    store = Store(tmp / "spotplane.db")
    inner = SimulatedFleet.from_options(clock=clock, data_dir=data_root, seed=5,
                                        state_path=tmp / "simfleet.db",
                                        lifetime_model=default_gce_model())
    fleet = ShownFleet(inner, shown)
    settings = ControllerSettings(pool_nodes={"H100": 8}, catalog_every_ticks=5)
    return store, Controller(store, fleet, clock, settings, epoch=store.take_controller_lease()), fleet


def _run(ctl: Controller, clock: SimClock, ticks: int) -> None:
    for _ in range(ticks):
        clock.advance(60.0)
        ctl.tick()


def _hp(store: Store, tenant_id: str, name: str, now: float) -> str:
    spec = JobSpec(name=name, kind="hp", compute_hours=0.5, accelerator="H100", gpus_per_worker=8)
    return store.submit_job(tenant_id, spec, now=now).id


def test_a_cluster_registered_later_is_placed_on_without_a_restart(tmp_path: Path,
                                                                   data_root: Path) -> None:
    clock = SimClock(start=0.0)
    store, ctl, fleet = _world(tmp_path, data_root, clock, WEST)
    t, _ = store.create_tenant("t", max_gpus=100)
    first = _hp(store, t.id, "before", clock.now())
    _run(ctl, clock, 3)
    assert store.get_job(first).zone == "us-west1-a"
    assert {o.zone for o in ctl.offers} == set(WEST)
    fleet.shown += CENTRAL  # a cluster of us-central1 registered
    _run(ctl, clock, 5)
    assert {o.zone for o in ctl.offers} == set(WEST) | set(CENTRAL)
    second = _hp(store, t.id, "after", clock.now())
    _run(ctl, clock, 3)
    assert store.get_job(second).state in (JobState.STARTING, JobState.RUNNING)
    assert store.get_job(second).zone == "us-central1-a"  # cheaper than the west, now seen


def test_a_catalog_that_does_not_answer_keeps_the_last_one(tmp_path: Path,
                                                           data_root: Path) -> None:
    clock = SimClock(start=0.0)
    store, ctl, fleet = _world(tmp_path, data_root, clock, WEST + CENTRAL)
    before, reads = list(ctl.offers), fleet.reads
    fleet.down = True
    _run(ctl, clock, 6)  # tick 5 reads the catalog: it fails, the loop goes on
    assert fleet.reads == reads + 1 and not fleet.down
    assert ctl.offers == before
    t, _ = store.create_tenant("t", max_gpus=100)
    job = _hp(store, t.id, "still", clock.now())
    _run(ctl, clock, 3)
    assert store.get_job(job).state in (JobState.STARTING, JobState.RUNNING)


class TwoTypesFleet(ShownFleet):
    """Each zone offers a second instance type, listed last, that never has spot; the fleet is
    probed zone by zone (no whole-fleet availability)."""

    def offers(self) -> list[Offer]:
        found = super().offers()
        return found + [dataclasses.replace(o, instance_type=f"{o.instance_type}-scarce")
                        for o in found]

    def spot_availability(self) -> dict[str, bool] | None:
        return None

    def spot_available(self, zone: str, instance_type: str) -> bool:
        return not instance_type.endswith("-scarce") and super().spot_available(zone, instance_type)


def test_a_zone_is_up_when_any_of_its_types_has_spot(tmp_path: Path, data_root: Path) -> None:
    clock = SimClock(start=0.0)
    store = Store(tmp_path / "spotplane.db")
    inner = SimulatedFleet.from_options(clock=clock, data_dir=data_root, seed=5,
                                        state_path=tmp_path / "simfleet.db",
                                        lifetime_model=default_gce_model())
    fleet = TwoTypesFleet(inner, WEST)
    ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"H100": 8}),
                     epoch=store.take_controller_lease())
    _run(ctl, clock, 1)
    truth = {z: inner.spot_available(z, next(o.instance_type for o in inner.offers() if o.zone == z))
             for z in WEST}
    assert any(truth.values())
    assert ctl.availability == truth  # not the scarce type's "no", listed last
