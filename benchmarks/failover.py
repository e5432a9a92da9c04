"""Controller failover: SIGKILL the active controller, time the standby's first committed tick.

``python -m benchmarks.failover [--json] [--trials 5] [--lease-ttl 10] [--jobs 12]`` starts a
private local Ray and, per trial, the control plane over a fresh store (simulated fleet) with a
standby controller (``spotplane up --standby``). Tenants' jobs run; once some are running, the
active controller's worker process gets SIGKILL. The clock runs from the kill to the first tick a
newer epoch commits (the lease's epoch moved on and the store's control time advanced). Then
the jobs finish and the trial checks: every job succeeded once, no launch intent made more
instances than it asked for, and a commit of the dead controller's epoch is refused.
Target: p50 < 15 s with the default lease (10 s).

The standby is the successor; Ray restarts the killed controller, which waits on the lease too
and claims it only 1 s after its expiry (when the standby is gone as well); the table says
which one won.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import ray

from actors.raylocal import init_local_ray
from actors.runtime import (
    ControlPlaneHandles,
    RuntimeSettings,
    start_control_plane,
    stop_control_plane,
)
from benchmarks import entry
from controlplane.core.errors import Conflict, InvalidInput
from controlplane.core.models import TERMINAL_STATES, JobKind, JobSpec, JobState
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.store import Store

TARGET_P50_S = 15.0


def _wait(cond: Any, timeout: float, what: str) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.02)


def _submit(store: Store, jobs: int) -> list[str]:
    tenant, _ = store.create_tenant("failover", max_gpus=1000)
    specs = [JobSpec(name=f"j{i}", kind=JobKind.SPOT if i % 2 else JobKind.HP, compute_hours=1 + i % 3,
                     workers=1 + i % 2, accelerator="V100") for i in range(jobs)]
    return [j.id for j in store.submit_jobs(tenant.id, specs, now=0.0)]


def _twice(store: Store, launches: dict[str, int]) -> int:
    """Launch intents that made more instances than they asked for."""
    asked = {i.id: int(i.payload["count"]) for i in store.intents("launch")}
    return sum(1 for iid, n in launches.items() if n > asked.get(iid, 0))


def trial(ttl_s: float, jobs: int) -> dict[str, Any]:
    """One kill and takeover over a fresh store; the measured numbers."""
    state = Path(tempfile.mkdtemp(prefix="spotplane-bench-failover-"))
    settings = RuntimeSettings(state_dir=state, namespace=f"failover-{uuid.uuid4().hex[:8]}",
                               detached=False, forecaster=False, policy_actors=False,
                               speed=3600.0, standby=True, lease_ttl_seconds=ttl_s,
                               fleet_options={"gcp": False},
                               controller=ControllerSettings(pool_nodes={"V100": 6}))
    store = Store(settings.db_path)
    ids = _submit(store, jobs)
    h: ControlPlaneHandles = start_control_plane(settings)
    try:
        _wait(lambda: store.job_counts().get("RUNNING", 0) > 0 and store.control_time() > 3600, 120,
              "a job running")
        before = h.status()
        os.kill(int(before["pid"]), signal.SIGKILL)
        killed = time.monotonic()
        at_kill = store.control_time()
        _wait(lambda: store.controller_lease()["epoch"] > before["epoch"]
              and store.control_time() > at_kill, ttl_s + 120, "a newer epoch's tick")
        took_s = time.monotonic() - killed
        lease = store.controller_lease()
        try:
            store.commit(epoch=before["epoch"])
            refused = False
        except Conflict:
            refused = True
        _wait(lambda: all(store.get_job(j).state in TERMINAL_STATES for j in ids)
              and not store.pending_intents(), 300, "every job finished")
        active = h.active()
        assert active is not None
        ray.get(active.pause.remote())  # count launches between ticks
        _wait(lambda: not store.pending_intents(), 60, "the last tick's intents")
        launches = ray.get(active.launches_per_intent.remote())
        winner = "standby" if lease["holder"].startswith("spotplane-controller-standby") else "restarted"
        return {"failover_s": round(took_s, 3), "epoch": lease["epoch"], "winner": winner,
                "jobs": len(ids),
                "succeeded": sum(store.get_job(j).state is JobState.SUCCEEDED for j in ids),
                "launched_twice": _twice(store, launches), "old_epoch_refused": refused}
    finally:
        stop_control_plane(h)
        store.close()


def run(trials: int = 5, ttl_s: float = 10.0, jobs: int = 12) -> dict[str, Any]:
    """``trials`` kills on a local Ray of its own (unless one runs); the ``--json`` dict."""
    own = not ray.is_initialized()
    if own:
        init_local_ray(control_plane=True, num_cpus=4, include_dashboard=False, log_to_driver=False,
                       configure_logging=False, namespace="spotplane-bench")
    try:
        rows = [trial(ttl_s, jobs) for _ in range(trials)]
    finally:
        if own:
            ray.shutdown()
    times = np.asarray([r["failover_s"] for r in rows])
    return {"trials": rows, "lease_ttl_s": ttl_s,
            "p50_s": round(float(np.percentile(times, 50)), 3),
            "max_s": round(float(times.max()), 3),
            "lost": sum(r["jobs"] - r["succeeded"] for r in rows),
            "launched_twice": sum(r["launched_twice"] for r in rows),
            "old_epoch_refused": all(r["old_epoch_refused"] for r in rows)}


@entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.failover", description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--trials", type=int, default=5, help="kills (p50 over them)")
    ap.add_argument("--lease-ttl", type=float, default=10.0, help="the lease's wall seconds (up's default)")
    ap.add_argument("--jobs", type=int, default=12, help="jobs per trial")
    args = ap.parse_args(argv)
    if args.trials < 1 or args.lease_ttl <= 0 or args.jobs < 1:
        raise InvalidInput("--trials/--lease-ttl/--jobs", "must be positive", fix="e.g. --trials 5 --lease-ttl 10")
    with contextlib.redirect_stdout(sys.stderr):
        result = run(args.trials, args.lease_ttl, args.jobs)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{'trial':>5} {'failover s':>10} {'winner':>10} {'epoch':>5} {'succeeded':>9} {'twice':>5} {'refused':>7}")
    for i, r in enumerate(result["trials"], 1):
        print(f"{i:>5} {r['failover_s']:>10} {r['winner']:>10} {r['epoch']:>5} "
              f"{r['succeeded']:>4}/{r['jobs']:<4} {r['launched_twice']:>5} {str(r['old_epoch_refused']):>7}")
    ok = result["p50_s"] < TARGET_P50_S
    print(f"\np50 {result['p50_s']} s (lease {result['lease_ttl_s']:g} s)  target < {TARGET_P50_S:g} s "
          f"{'ok' if ok else 'MISSED'}; lost {result['lost']}, launched twice {result['launched_twice']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
