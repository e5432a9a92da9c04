"""``spotplane up --demo``: three tenants, a bag, deadline, spot and HP jobs, all through the API.

The scenario (control-plane hours from the demo's start, simulated fleet):

* ``acme`` submits four deadline jobs, C = 8 to 48 h with C/R from 0.9 to 0.7, two on
  8x H100 GCP VMs and two on AWS V100 gangs; Uniform Progress drives each between spot,
  on-demand and idle.
* ``beta`` submits one bag of 20 parameter sets of a sweep (1 V100 each, 2-6 h).
* ``gamma`` submits three spot gangs that fill the V100 pool, and at ``hp_at_hours`` two HP
  jobs (once those gangs run) that must evict some of them (GFS preemptive scheduling); the evicted jobs resume from
  their last checkpoint.
* ``gamma`` also submits one *real* job (:func:`real_job`): ``examples/train_numpy.py`` runs as a
  Ray job pinned to its simulated V100 node; a preemption kills the process and the next node
  restores it from its last checkpoint artifact.

:func:`run_demo` submits everything with :class:`~controlplane.client.SpotplaneClient`, shows a
live table while the jobs run, then gathers the report (per job: finish vs deadline,
preemptions survived, checkpoints, cost vs on-demand only) and draws the fleet and the decisions
over time to a PNG.
"""

from __future__ import annotations

import json
import logging
import secrets
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from controlplane.cli.live import LiveTable
from controlplane.client import SpotplaneClient
from controlplane.core.config import REPO_ROOT
from controlplane.core.units import HOUR

log = logging.getLogger(__name__)

DEMO_SPEED = 3600.0  # simulated seconds per wall second of `spotplane up --demo`
TRAIN_SCRIPT = REPO_ROOT / "examples" / "train_numpy.py"
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


# --------------------------------------------------------------------------------------------
# The scenario
# --------------------------------------------------------------------------------------------
def _deadline(name: str, accelerator: str, gpus: int, workers: int, c: float, ratio: float) -> dict[str, Any]:
    """A deadline job with compute C and deadline R = C / ratio (the job fraction C/R)."""
    return {"name": name, "kind": "deadline", "accelerator": accelerator, "gpus_per_worker": gpus,
            "workers": workers, "compute_hours": c, "deadline_hours": round(c / ratio, 2),
            "checkpoint_hours": 0.02, "overhead_hours": 0.05}


def real_job(name: str, steps: int, step_seconds: float, *, speed: float = DEMO_SPEED,
             seed: int = 0, accelerator: str = "V100") -> dict[str, Any]:
    """A spot job that runs ``examples/train_numpy.py`` for real (absolute path: any working dir).

    Its compute C is the script's wall time (``steps * step_seconds``) in control-plane hours at
    ``speed`` simulated seconds per wall second.
    """
    cmd = shlex.join(["python", str(TRAIN_SCRIPT), "--steps", str(steps), "--seed", str(seed),
                      "--step-seconds", repr(float(step_seconds))])
    return {"name": name, "kind": "spot", "accelerator": accelerator, "workers": 1,
            "compute_hours": round(steps * step_seconds * speed / HOUR, 4),
            "checkpoint_hours": 0.02, "entrypoint": cmd}


@dataclass(frozen=True)
class Scenario:
    """Who submits what, and when (all request bodies of the public API)."""

    tenants: dict[str, str] = field(default_factory=lambda: {
        "acme": "deadline jobs (research lab)",
        "beta": "a bag of 20 sweep jobs",
        "gamma": "spot batch jobs and HP production jobs",
    })
    deadline_jobs: list[dict[str, Any]] = field(default_factory=lambda: [
        _deadline("llm-finetune", "H100", 8, 1, 30.0, 0.75),
        _deadline("vision-pretrain", "H100", 8, 2, 48.0, 0.70),
        _deadline("speech-train", "V100", 1, 4, 8.0, 0.90),
        _deadline("rl-agent", "V100", 1, 2, 16.0, 0.80),
    ])
    bag: dict[str, Any] = field(default_factory=lambda: {
        "name": "sweep",
        "template": {"name": "sweep", "kind": "spot", "accelerator": "V100", "compute_hours": 4.0,
                     "checkpoint_hours": 0.02, "entrypoint": None},
        "params": [{"lr": round(10 ** (-1 - i / 5), 6), "seed": i} for i in range(20)],
        "compute_hours": [2.0 + (i * 7) % 5 for i in range(20)],
    })
    spot_jobs: list[dict[str, Any]] = field(default_factory=lambda: [
        {"name": "batch-embed", "kind": "spot", "accelerator": "V100", "workers": 8, "compute_hours": 6.0},
        {"name": "eval-suite", "kind": "spot", "accelerator": "V100", "workers": 8, "compute_hours": 4.0},
        {"name": "data-prep", "kind": "spot", "accelerator": "V100", "workers": 6, "compute_hours": 5.0},
    ])
    hp_jobs: list[dict[str, Any]] = field(default_factory=lambda: [
        {"name": "prod-inference", "kind": "hp", "accelerator": "V100", "workers": 8, "compute_hours": 3.0},
        {"name": "hotfix-train", "kind": "hp", "accelerator": "V100", "workers": 4, "compute_hours": 2.0},
    ])
    hp_at_hours: float = 2.0
    #: the HP jobs wait (at most this many hours past ``hp_at_hours``) until one of gamma's spot
    #: jobs and each real job run, so that they find something to evict however slow the machine
    hp_wait_hours: float = 24.0
    real_jobs: list[dict[str, Any]] = field(default_factory=lambda: [
        real_job("numpy-train", steps=600, step_seconds=0.03),
    ])

    @classmethod
    def at_speed(cls, speed: float) -> Scenario:
        """The default scenario with its real jobs' C measured at ``speed`` (``up --speed``)."""
        return cls(real_jobs=[real_job("numpy-train", steps=600, step_seconds=0.03, speed=speed)])

    @property
    def horizon_hours(self) -> float:
        """The latest deadline: the demo cannot need longer than this (plus slack)."""
        return max(float(j["deadline_hours"]) for j in self.deadline_jobs)


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------
@dataclass
class JobReport:
    id: str
    name: str
    tenant: str
    kind: str
    state: str
    finished_hours: float | None
    deadline_hours: float | None
    deadline_met: bool | None
    cost: float
    on_demand_cost: float
    preemptions: int
    checkpoints: int
    real: bool = False  # ran its entrypoint as a Ray job (else a simulated workload)

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "deadline_met": self.deadline_met,
                "cost": round(self.cost, 4), "preemptions": self.preemptions,
                "checkpoints": self.checkpoints, "name": self.name, "tenant": self.tenant,
                "state": self.state, "on_demand_cost": round(self.on_demand_cost, 4),
                "finished_hours": self.finished_hours, "deadline_hours": self.deadline_hours,
                "real": self.real}


@dataclass
class DemoReport:
    jobs: list[JobReport]
    wall_seconds: float
    start: float  # control-plane seconds when the demo submitted
    hp_evictions: int = 0
    plot: str | None = None

    @property
    def total_cost(self) -> float:
        return sum(j.cost for j in self.jobs)

    @property
    def on_demand_cost(self) -> float:
        return sum(j.on_demand_cost for j in self.jobs)

    @property
    def savings_pct(self) -> float:
        od = self.on_demand_cost
        return 100.0 * (1.0 - self.total_cost / od) if od > 0 else 0.0

    @property
    def all_deadlines_met(self) -> bool:
        return all(j.deadline_met is True for j in self.jobs if j.kind == "deadline")

    @property
    def all_finished(self) -> bool:
        return all(j.state == "SUCCEEDED" for j in self.jobs)

    def as_json(self) -> dict[str, Any]:
        return {
            "jobs": [j.as_json() for j in self.jobs],
            "total_cost": round(self.total_cost, 4),
            "on_demand_cost": round(self.on_demand_cost, 4),
            "savings_pct": round(self.savings_pct, 2),
            "all_deadlines_met": self.all_deadlines_met,
            "all_finished": self.all_finished,
            "hp_evictions": self.hp_evictions,
            "wall_seconds": round(self.wall_seconds, 1),
            "plot": self.plot,
        }

    def render(self) -> str:
        lines = [
            f"{'job':<18} {'tenant':<8} {'kind':<9} {'state':<10} {'finished':>9} {'deadline':>9} "
            f"{'met':>5} {'preempt':>7} {'ckpts':>5} {'cost $':>9} {'on-demand $':>11}  runs",
        ]
        for j in self.jobs:
            fin = "-" if j.finished_hours is None else f"{j.finished_hours:.1f}h"
            dl = "-" if j.deadline_hours is None else f"{j.deadline_hours:.1f}h"
            met = "-" if j.deadline_met is None else ("yes" if j.deadline_met else "NO")
            lines.append(f"{j.name[:18]:<18} {j.tenant[:8]:<8} {j.kind:<9} {j.state:<10} {fin:>9} {dl:>9} "
                         f"{met:>5} {j.preemptions:>7} {j.checkpoints:>5} {j.cost:>9.2f} {j.on_demand_cost:>11.2f}  "
                         + ("ray job" if j.real else "sim"))
        deadline = [j for j in self.jobs if j.kind == "deadline"]
        n_met = sum(1 for j in deadline if j.deadline_met)
        lines.append("")
        lines += [f"real job {j.name}: {j.state}, {j.preemptions} preemptions survived, {j.checkpoints} "
                  f"checkpoints (a Ray job running examples/train_numpy.py)" for j in self.jobs if j.real]
        lines += [
            f"deadlines met: {n_met}/{len(deadline)}   preemptions survived: "
            f"{sum(j.preemptions for j in self.jobs)} ({self.hp_evictions} by HP jobs)   checkpoints: "
            f"{sum(j.checkpoints for j in self.jobs)}",
            f"cost: ${self.total_cost:,.2f}   on-demand only: ${self.on_demand_cost:,.2f}   "
            f"savings: {self.savings_pct:.1f}%  (target >= 40%)",
            f"wall time: {self.wall_seconds:.0f} s" + (f"   plot: {self.plot}" if self.plot else ""),
        ]
        return "\n".join(lines)


def build_report(jobs: Sequence[Mapping[str, Any]], tenants: Mapping[str, str], start: float,
                 wall_seconds: float, hp_evictions: int = 0) -> DemoReport:
    """The report from the jobs as the API returns them (times relative to the demo's start)."""
    rows = []
    for j in jobs:
        fin = j.get("finished_at")
        dl = j.get("deadline_at")
        rows.append(JobReport(
            id=str(j["id"]), name=str(j["name"]), tenant=tenants.get(str(j["tenant_id"]), "?"),
            kind=str(j["kind"]), state=str(j["state"]),
            finished_hours=None if fin is None else round((fin - start) / HOUR, 3),
            deadline_hours=None if dl is None else round((dl - start) / HOUR, 3),
            deadline_met=j.get("met_deadline") if dl is not None else None,
            cost=float(j.get("cost", 0.0)), on_demand_cost=float(j.get("on_demand_cost", 0.0)),
            preemptions=int(j.get("preemptions", 0)), checkpoints=int(j.get("checkpoints", 0)),
            real=bool((j.get("spec") or {}).get("entrypoint")),
        ))
    return DemoReport(rows, wall_seconds, start, hp_evictions)


# --------------------------------------------------------------------------------------------
# Driving the demo through the API
# --------------------------------------------------------------------------------------------
@dataclass
class DemoRun:
    """The state of one demo run: tenants and tokens, submitted job ids."""

    admin: SpotplaneClient
    tenants: dict[str, str] = field(default_factory=dict)  # tenant id -> short name
    clients: dict[str, SpotplaneClient] = field(default_factory=dict)  # short name -> client
    job_ids: list[str] = field(default_factory=list)
    spot_ids: list[str] = field(default_factory=list)  # gamma's spot jobs
    real_ids: list[str] = field(default_factory=list)  # gamma's real (Ray) jobs
    start: float = 0.0
    hp_submitted: bool = False

    def close(self) -> None:
        for c in self.clients.values():
            c.close()


def create_tenants(run: DemoRun, scenario: Scenario, suffix: str) -> None:
    """Admin creates the three tenants (fresh names per run: tokens are shown only once)."""
    for short in scenario.tenants:
        created = run.admin.create_tenant(f"{short}-{suffix}", max_gpus=256)
        run.tenants[created["tenant"]["id"]] = short
        run.clients[short] = run.admin.with_token(created["token"])


def submit_initial(run: DemoRun, scenario: Scenario) -> None:
    """Deadline jobs (acme), the bag (beta) and the spot gangs (gamma), through the API."""
    for spec in scenario.deadline_jobs:
        run.job_ids.append(run.clients["acme"].submit(spec)["id"])
    bag = run.clients["beta"].submit_bag(scenario.bag)
    run.job_ids.extend(bag["job_ids"])
    gamma = run.clients["gamma"]
    run.spot_ids = [gamma.submit(spec)["id"] for spec in scenario.spot_jobs]
    run.real_ids = [gamma.submit(spec)["id"] for spec in scenario.real_jobs]
    run.job_ids.extend(run.spot_ids + run.real_ids)


def submit_hp(run: DemoRun, scenario: Scenario) -> None:
    for spec in scenario.hp_jobs:
        run.job_ids.append(run.clients["gamma"].submit(spec)["id"])
    run.hp_submitted = True


def hp_due(run: DemoRun, scenario: Scenario, jobs: Sequence[Mapping[str, Any]],
           now: float) -> bool:
    """HP time: ``hp_at_hours`` has passed, a spot job of gamma runs and each real job runs or is
    done (or, whatever they do, ``hp_wait_hours`` later still)."""
    due = run.start + scenario.hp_at_hours * HOUR
    if run.hp_submitted or now < due:
        return False
    state = {j["id"]: j["state"] for j in jobs}
    spot = not run.spot_ids or any(state.get(i) == "RUNNING" for i in run.spot_ids)
    real = all(state.get(i) == "RUNNING" or state.get(i) in TERMINAL for i in run.real_ids)
    return (spot and real) or now >= due + scenario.hp_wait_hours * HOUR


def fetch_jobs(run: DemoRun) -> list[dict[str, Any]]:
    """This run's jobs, in submission order (one list call per tenant of this run)."""
    wanted = set(run.job_ids)
    jobs = [j for tid in run.tenants for j in run.admin.jobs(tenant_id=tid, limit=10_000)]
    return sorted((j for j in jobs if j["id"] in wanted), key=lambda j: run.job_ids.index(j["id"]))


def _footer(jobs: Sequence[Mapping[str, Any]]) -> str:
    cost = sum(float(j.get("cost", 0.0)) for j in jobs)
    od = sum(float(j.get("on_demand_cost", 0.0)) for j in jobs)
    saved = f"{100 * (1 - cost / od):.0f}% saved" if od > 0 else ""
    return f"cost ${cost:,.0f} vs ${od:,.0f} on-demand {saved}"


def run_demo(admin: SpotplaneClient, *, out: TextIO, plot_path: Path | None = None,
             scenario: Scenario | None = None, timeout_s: float = 290.0, poll_s: float = 0.5,
             tty: bool | None = None, sleep: Callable[[float], None] = time.sleep) -> DemoReport:
    """Run the scenario against the API at ``admin.base_url``; returns the report."""
    scenario = scenario or Scenario()
    run = DemoRun(admin=admin)
    wall0 = time.monotonic()
    try:
        create_tenants(run, scenario, secrets.token_hex(2))
        run.start = float(admin.clock()["now"])
        submit_initial(run, scenario)
        out.write(f"demo: 3 tenants, {len(run.job_ids)} jobs submitted at t = {run.start / HOUR:.2f} h; "
                  f"{len(scenario.hp_jobs)} HP jobs follow at +{scenario.hp_at_hours:.0f} h, once gamma's jobs run\n")
        table = LiveTable(out, tty=tty)
        jobs: list[dict[str, Any]] = []
        while time.monotonic() - wall0 < timeout_s:
            now = float(admin.clock()["now"])
            jobs = fetch_jobs(run)
            if hp_due(run, scenario, jobs, now):
                submit_hp(run, scenario)
                jobs = fetch_jobs(run)
            table.update(jobs, now, tenants=run.tenants, footer=_footer(jobs),
                         wall=time.monotonic() - wall0)
            if run.hp_submitted and all(j["state"] in TERMINAL for j in jobs):
                break
            sleep(poll_s)
        else:
            out.write(f"demo: stopped waiting after {timeout_s:.0f} s; unfinished jobs are reported as such\n")
        jobs = fetch_jobs(run)
        now = float(admin.clock()["now"])
        table.final(jobs, now, tenants=run.tenants, footer=_footer(jobs))
        evictions = count_hp_evictions(admin, jobs)
        report = build_report(jobs, run.tenants, run.start, time.monotonic() - wall0, evictions)
        if plot_path is not None:
            try:
                draw_plot(admin, jobs, run, plot_path, now)
                report.plot = str(plot_path)
            except Exception as exc:  # noqa: BLE001 - a plot must not lose the report
                log.warning("demo plot failed: %s", exc)
        return report
    finally:
        run.close()


def count_hp_evictions(admin: SpotplaneClient, jobs: Sequence[Mapping[str, Any]]) -> int:
    """Spot jobs' preemptions caused by an HP job's placement (from the decision traces)."""
    n = 0
    for j in jobs:
        if j["kind"] != "spot" or not j.get("preemptions"):
            continue
        n += sum(1 for d in admin.decisions(j["id"]) if d["action"] == "preempt" and "hp job" in d["reason"])
    return n


# --------------------------------------------------------------------------------------------
# Plot: the fleet and the decisions over time
# --------------------------------------------------------------------------------------------
_STATE_COLORS = {"QUEUED": "#d9d9d9", "STARTING": "#a6a6a6", "RUNNING": "#2ca02c",
                 "CHECKPOINTING": "#17becf", "PREEMPTED": "#ff7f0e"}
_ACTION_LEVEL = {"idle": 0, "spot": 1, "on_demand": 2}


def _segments(events: Sequence[Mapping[str, Any]], end: float) -> list[tuple[float, float, str]]:
    """(start, stop, state) spans of a job from its transition events."""
    spans: list[tuple[float, float, str]] = []
    cur: tuple[float, str] | None = None
    for e in events:
        if e.get("kind") != "transition" or not e.get("dst"):
            continue
        if cur is not None:
            spans.append((cur[0], e["at"], cur[1]))
        cur = (e["at"], e["dst"])
    if cur is not None and cur[1] not in TERMINAL:
        spans.append((cur[0], end, cur[1]))
    return spans


def draw_plot(admin: SpotplaneClient, jobs: Sequence[Mapping[str, Any]], run: DemoRun,
              path: Path, now: float) -> None:
    """Three panels: live nodes by market, each job's states, deadline-policy decisions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    t0 = run.start
    nodes = [n for n in admin.nodes() if n["requested_at"] >= t0]  # this run's (released nodes lose their tenant)
    fig, (ax_fleet, ax_jobs, ax_dec) = plt.subplots(
        3, 1, figsize=(12, 11), sharex=True, gridspec_kw={"height_ratios": [1.2, 2.6, 1.0]})

    grid = np.linspace(0.0, max(1.0, (now - t0) / HOUR), 600)
    for market, color in (("spot", "#2ca02c"), ("on_demand", "#1f77b4")):
        for acc in sorted({n["accelerator"] for n in nodes}):
            spans = [((n.get("launched_at") or n["requested_at"]) - t0, (n.get("ended_at") or now) - t0)
                     for n in nodes if n["market"] == market and n["accelerator"] == acc]
            if not spans:
                continue
            count = np.array([sum(1 for a, b in spans if a / HOUR <= t < b / HOUR) for t in grid])
            ax_fleet.step(grid, count, where="post", label=f"{acc} {market}",
                          color=color, ls="-" if acc == "V100" else "--")
    pre = [((n.get("ended_at") or now) - t0) / HOUR for n in nodes if n["state"] == "PREEMPTED"]
    if pre:
        ax_fleet.plot(pre, np.zeros(len(pre)), "x", color="red", label="spot preemption")
    ax_fleet.set_ylabel("live nodes")
    ax_fleet.legend(loc="upper right", fontsize=8, ncol=3)
    ax_fleet.set_title("spotplane demo: fleet, jobs and decisions over time")

    order = sorted(jobs, key=lambda j: ({"deadline": 0, "hp": 1, "spot": 2}.get(j["kind"], 3), j["submitted_at"]))
    for row, j in enumerate(order):
        events = admin.events(j["id"])
        for a, b, state in _segments(events, now):
            ax_jobs.broken_barh([((a - t0) / HOUR, max((b - a) / HOUR, 1e-3))], (row - 0.4, 0.8),
                                color=_STATE_COLORS.get(state, "#cccccc"))
        lost = [(e["at"] - t0) / HOUR for e in events if e.get("dst") == "PREEMPTED"]
        ax_jobs.plot(lost, [row] * len(lost), "x", color="red", ms=5)
        if j.get("deadline_at") is not None:
            ax_jobs.plot([(j["deadline_at"] - t0) / HOUR], [row], "|", color="black", ms=14, mew=2)
    ax_jobs.set_yticks(range(len(order)))
    ax_jobs.set_yticklabels([f"{j['name']} ({j['kind']})" for j in order], fontsize=7)
    ax_jobs.invert_yaxis()
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in _STATE_COLORS.values()]
    ax_jobs.legend(handles, list(_STATE_COLORS), loc="lower right", fontsize=8, ncol=5)
    ax_jobs.set_ylabel("jobs (| = deadline, x = preempted)")

    for i, j in enumerate(j for j in order if j["kind"] == "deadline"):
        ds = [d for d in admin.decisions(j["id"]) if d["action"] in _ACTION_LEVEL]
        if not ds:
            continue
        end = j.get("finished_at") or now
        xs = [(d["at"] - t0) / HOUR for d in ds] + [(end - t0) / HOUR]
        ys = [_ACTION_LEVEL[d["action"]] + 0.07 * i for d in ds]  # offset so lines stay apart
        ax_dec.step(xs, ys + ys[-1:], where="post", label=j["name"])
    ax_dec.set_yticks(list(_ACTION_LEVEL.values()))
    ax_dec.set_yticklabels(list(_ACTION_LEVEL))
    ax_dec.set_ylabel("deadline policy")
    ax_dec.set_xlabel("control-plane hours since the demo started")
    ax_dec.legend(loc="upper right", fontsize=8, ncol=4)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report_json(report: DemoReport, path: str | Path) -> Path:
    """The ``--report-json`` file (written atomically)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(report.as_json(), indent=2))
    tmp.replace(p)
    return p
