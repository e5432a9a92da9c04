"""The reconcile loop on a simulated clock, store and fleet, as the controller tests build it
(imported as ``tests.loops``; fixtures stay in conftest)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusters.sim import SimulatedFleet
from controlplane.core.clock import SimClock
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.store import Store


@dataclass
class SimLoop:
    """One controller over a fresh store and a simulated fleet, fenced by the store's lease."""

    clock: SimClock
    store: Store
    fleet: SimulatedFleet
    ctl: Controller

    def run(self, hours: float, dt: float = 60.0) -> None:
        """Advance the clock ``dt`` and tick, for ``hours``."""
        for _ in range(int(hours * 3600 / dt)):
            self.clock.advance(dt)
            self.ctl.tick()


def sim_loop(tmp: Path, data_root: Path, pools: dict[str, int], *, seed: int = 5,
             clock: SimClock | None = None, settings: ControllerSettings | None = None,
             db: str | Path | None = None, controller: dict[str, Any] | None = None,
             **fleet_options: Any) -> SimLoop:
    """A loop over ``pools`` (``ControllerSettings.pool_nodes`` unless ``settings`` is given);
    ``controller`` holds the Controller's own keywords (executor, policy_host, ...), the rest go
    to :meth:`SimulatedFleet.from_options`."""
    clock = clock or SimClock(start=0.0)
    store = Store(db or tmp / "spotplane.db")
    fleet = SimulatedFleet.from_options(clock=clock, data_dir=data_root, seed=seed,
                                        state_path=tmp / "simfleet.db", **fleet_options)
    ctl = Controller(store, fleet, clock, settings or ControllerSettings(pool_nodes=pools),
                     epoch=store.take_controller_lease(), **(controller or {}))
    return SimLoop(clock, store, fleet, ctl)
