"""`python -m benchmarks.chaos` for a short while, in its own process and its own local Ray (it
SIGKILLs processes under its own raylet only): every kill is survived and the invariants hold.

Invariants only: a job that made no progress in the drain (``stalled``, which a busy machine
makes) is the benchmark's figure; a ``stuck`` one, which nothing the loop waits on will move, is
a broken invariant (``benchmarks.chaos.waits_on``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_a_short_chaos_run_keeps_every_invariant() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.chaos", "--minutes", "0.15", "--json", "--rate", "3",
         "--kill-every", "1", "--real-jobs", "0", "--drain", "10", "--seed", "3",
         "--kinds", "controller,api_replica,http_proxy", "--min-kills", "3"],
        cwd=ROOT, capture_output=True, text=True, timeout=540)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    r = json.loads(proc.stdout)
    assert r["accepted"] > 0 and r["stored"] == r["accepted"], r
    assert (r["lost"], r["duplicated"], r["launched_twice"], r["double_booked"]) == (0, 0, 0, 0)
    assert r["stuck"] == 0, r["stuck_jobs"]
    assert r["quarantined"] == 0, r
    assert r["kills_total"] >= 3 and r["survived_total"] == r["kills_total"], r["kills"]
    assert all(r["kills"][k]["kills"] >= 1 for k in ("controller", "api_replica", "http_proxy"))
    assert r["ok"] is True and proc.returncode == 0, r


@pytest.mark.timeout(900)  # its own bounds: 5 min for a checkpointed real job, 5 min of kills
def test_policy_checkpoint_and_raylet_kills_with_real_jobs_on_a_multi_node_workload() -> None:
    """The kills that must not stop anything: deadline-policy, quota, forecaster (restarted by
    Ray), a real job's checkpoint actor on the workload Ray (not restarted: its job moves on),
    and the raylet under a running real job on a multi-node workload Ray (the job runs again on
    another raylet in a later attempt, restored from its checkpoint). One run for all five,
    since each run starts two Rays and the Serve API. The kills go on until each kind was made
    once; the drain is short, as the real jobs (a minute of steps each, and their restores) need
    not finish: what is checked is that each one whose raylet was killed came back restored."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.chaos", "--minutes", "0.25", "--json", "--rate", "2",
         "--kill-every", "2", "--real-jobs", "2", "--drain", "10", "--seed", "5",
         "--kinds", "deadline_policy,quota,forecaster,checkpoint,worker_raylet",
         "--min-kills", "5"],
        cwd=ROOT, capture_output=True, text=True, timeout=840)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    r = json.loads(proc.stdout)
    assert r["accepted"] > 0 and r["stored"] == r["accepted"], r
    assert (r["lost"], r["duplicated"], r["launched_twice"], r["double_booked"]) == (0, 0, 0, 0)
    assert r["stuck"] == 0, r["stuck_jobs"]
    assert r["quarantined"] == 0, r
    assert r["kills_total"] >= 5 and r["survived_total"] == r["kills_total"], r["kills"]
    kinds = ("deadline_policy", "quota", "forecaster", "checkpoint", "worker_raylet")
    assert all(r["kills"][k]["kills"] >= 1 for k in kinds), r["kills"]
    assert r["raylet_jobs"] >= 1 and r["raylet_jobs_resumed"] == r["raylet_jobs"], r
    assert r["ok"] is True and proc.returncode == 0, r
