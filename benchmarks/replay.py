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
from pathlib import Path
from typing import Any

from benchmarks import entry
from clusters.simfleet import SimulatedFleet
from controlplane.cli.demo import Scenario
from controlplane.core.clock import SimClock
from controlplane.core.errors import InvalidInput
from controlplane.core.models import Job, JobKind, JobSpec, JobState
from controlplane.core.units import HOUR
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.store import Store
from policies.preemption import default_gce_model

TICK_SECONDS = 60.0
WARMUP_TICK_SECONDS = 600.0
MAX_HOURS = 80.0
TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


class Replay:
    """One control plane on a manual clock, and the scenario's jobs submitted into its store."""

    def __init__(self, start_hours: float, seed: int, state: Path) -> None:
        self.clock = SimClock(start=0.0)
        fleet = SimulatedFleet.from_options(clock=self.clock, seed=seed, state_path=state / "fleet.db",
                                            lifetime_model=default_gce_model())
        self.store = Store(state / "spotplane.db")
        self.controller = Controller(self.store, fleet, self.clock, ControllerSettings(),
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


def deadline_met(job: Job) -> bool | None:
    """Whether a deadline job finished by its deadline (None for other kinds)."""
    if job.kind is not JobKind.DEADLINE or job.deadline_at is None:
        return None
    return job.finished_at is not None and job.finished_at <= job.deadline_at


def report(replay: Replay, jobs: list[Job]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = [{"name": j.spec.name, "tenant": replay.names[j.tenant_id], "kind": j.kind.value,
             "state": j.state.value, "cost": round(j.cost, 4), "on_demand_cost": round(j.on_demand_cost, 4),
             "preemptions": j.preemptions, "checkpoints": j.checkpoints,
             "finished_hours": None if j.finished_at is None else round(j.finished_at / HOUR, 4),
             "deadline_met": deadline_met(j)}
            for j in jobs]
    cost, on_demand = sum(r["cost"] for r in rows), sum(r["on_demand_cost"] for r in rows)
    return {"ticks": replay.ticks, "total_cost": round(cost, 4), "on_demand_cost": round(on_demand, 4),
            "savings_pct": round(100 * (1 - cost / on_demand), 2),
            "deadlines_met": sum(r["deadline_met"] is True for r in rows),
            "deadline_jobs": sum(r["kind"] == "deadline" for r in rows), "jobs": rows}


@entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.replay", description=__doc__)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--start-hours", type=float, default=7.0,
                    help="hours of the fleet's traces before the jobs arrive (default 7)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="spotplane-replay-") as tmp:
        print(f"replaying the demo from {args.start_hours} h ...", file=sys.stderr)
        replay = Replay(args.start_hours, args.seed, Path(tmp))
        out = report(replay, replay.run())
        replay.store.close()
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{'job':<16}{'tenant':<8}{'kind':<10}{'cost $':>10}{'preempt':>9}{'ckpts':>7}{'done h':>9}")
    for r in out["jobs"]:
        done = f"{r['finished_hours']:.2f}" if r["finished_hours"] is not None else "-"
        print(f"{r['name']:<16}{r['tenant']:<8}{r['kind']:<10}{r['cost']:>10.2f}{r['preemptions']:>9}"
              f"{r['checkpoints']:>7}{done:>9}")
    print(f"cost ${out['total_cost']:,.2f} vs ${out['on_demand_cost']:,.2f} on demand only: "
          f"{out['savings_pct']:.1f}% saved; deadlines met {out['deadlines_met']}/{out['deadline_jobs']}; "
          f"{out['ticks']} ticks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
