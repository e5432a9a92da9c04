"""The demo's simulated jobs on a stepped clock: the same decisions and costs on every run.

``spotplane up --demo`` paces its clock by wall time, so how fast the machine starts moves when
the jobs arrive and every figure with it. This replays the demo's scenario (the deadline jobs,
the bag and the spot and HP jobs; not the real Ray job) through the same ``Controller``, store
and simulated fleet, one 60 s tick at a time from a fixed start, so two runs of the same code
print the same bytes: what a refactor that must not change behaviour is checked against.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import entry
from clusters.sim import SimulatedFleet
from controlplane.cli.demo import DemoReport, Scenario, build_report
from controlplane.core.clock import SimClock
from controlplane.core.errors import InvalidInput
from controlplane.core.models import Job, JobSpec, JobState
from controlplane.core.units import HOUR
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.store import Store
from policies.preemption import default_gce_model
from serve.schemas import JobView

TICK_SECONDS = 60.0
WARMUP_TICK_SECONDS = 600.0
MAX_HOURS = 80.0
TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


class Replay:
    """One control plane on a manual clock, and the scenario's jobs submitted into its store."""

    def __init__(self, start_hours: float, seed: int, state: Path,
                 settings: ControllerSettings | None = None) -> None:
        self.clock = SimClock(start=0.0)
        fleet = SimulatedFleet.from_options(clock=self.clock, seed=seed, state_path=state / "fleet.db",
                                            lifetime_model=default_gce_model())
        self.store = Store(state / "spotplane.db")
        self.controller = Controller(self.store, fleet, self.clock, settings or ControllerSettings(),
                                     epoch=self.store.take_controller_lease())
        self.scenario = Scenario()
        self.tenants = {name: self.store.create_tenant(name, max_gpus=10_000)[0].id
                        for name in self.scenario.tenants}
        self.names = {v: k for k, v in self.tenants.items()}
        self.ids: list[str] = []
        self.ticks = 0
        while self.clock.now() < start_hours * HOUR:  # the fleet's traces run before any job
            self.step(min(WARMUP_TICK_SECONDS, start_hours * HOUR - self.clock.now()))

    def step(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.controller.tick()
        self.ticks += 1

    def submit(self, tenant: str, body: dict[str, Any]) -> None:
        spec = JobSpec(**{k: v for k, v in body.items() if k != "entrypoint"})
        self.ids.append(self.store.submit_job(self.tenants[tenant], spec, now=self.clock.now()).id)

    def run(self) -> list[Job]:
        """Submit as the demo does (HP jobs ``hp_at_hours`` later), tick until every job is done."""
        sc = self.scenario
        for body in sc.deadline_jobs:
            self.submit("acme", body)
        for i, value in enumerate(sc.bag["compute_hours"]):
            self.submit("beta", {**sc.bag["template"], "name": f"sweep-{i}", "compute_hours": value})
        for body in sc.spot_jobs:
            self.submit("gamma", body)
        start = self.clock.now()
        hp_due: float | None = start + sc.hp_at_hours * HOUR
        while self.clock.now() - start < MAX_HOURS * HOUR:
            self.step(TICK_SECONDS)
            if hp_due is not None and self.clock.now() >= hp_due:
                for body in sc.hp_jobs:
                    self.submit("gamma", body)
                hp_due = None
            jobs = [self.store.get_job(i) for i in self.ids]
            if hp_due is None and all(j.state in TERMINAL for j in jobs):
                return jobs
        raise InvalidInput("replay", f"jobs still running after {MAX_HOURS:.0f} h",
                           fix="a scenario this long needs a larger MAX_HOURS")


def report(replay: Replay, jobs: list[Job], submitted_at: float, wall_seconds: float) -> DemoReport:
    """The demo's own report of the replayed jobs (their API views, times from submission)."""
    views = [JobView.of(j).model_dump(mode="json") for j in jobs]
    return build_report(views, replay.names, submitted_at, wall_seconds)


@entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.replay", description=__doc__)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--start-hours", type=float, default=7.0,
                    help="hours of the fleet's traces before the jobs arrive (default 7)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--deadline-policy", default=None,
                    help="every deadline job's policy (default: the controller's default)")
    ap.add_argument("--reuse", default="by_age", help="by_age | always | never")
    ap.add_argument("--hot-spare-seconds", type=float, default=3600.0)
    args = ap.parse_args(argv)
    settings = ControllerSettings(deadline_policy=args.deadline_policy, reuse=args.reuse,
                                  hot_spare_seconds=args.hot_spare_seconds)
    with tempfile.TemporaryDirectory(prefix="spotplane-replay-") as tmp:
        print(f"replaying the demo from {args.start_hours} h ...", file=sys.stderr)
        replay = Replay(args.start_hours, args.seed, Path(tmp), settings)
        submitted_at, t0 = replay.clock.now(), time.perf_counter()
        demo = report(replay, replay.run(), submitted_at, time.perf_counter() - t0)
        replay.store.close()
    if args.json:
        print(json.dumps({"ticks": replay.ticks, **demo.as_json()}))
        return 0
    print(demo.render())
    print(f"{replay.ticks} ticks of the stepped clock")
    return 0


if __name__ == "__main__":
    sys.exit(main())
