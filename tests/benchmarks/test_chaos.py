"""`python -m benchmarks.chaos` for a short while, in its own process and its own local Ray (it
SIGKILLs processes under its own raylet only): every kill is survived and the invariants hold."""

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
        [sys.executable, "-m", "benchmarks.chaos", "--minutes", "0.3", "--json", "--rate", "3",
         "--kill-every", "1", "--real-jobs", "0", "--drain", "90", "--seed", "3",
         "--kinds", "controller,api_replica,http_proxy", "--min-kills", "3"],
        cwd=ROOT, capture_output=True, text=True, timeout=540)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    r = json.loads(proc.stdout)
    assert r["accepted"] > 0 and r["stored"] == r["accepted"], r
    assert (r["lost"], r["duplicated"], r["launched_twice"], r["double_booked"]) == (0, 0, 0, 0)
    assert r["stuck"] == 0 and r["quarantined"] == 0, r
    assert r["kills_total"] >= 3 and r["survived_total"] == r["kills_total"], r["kills"]
    assert all(r["kills"][k]["kills"] >= 1 for k in ("controller", "api_replica", "http_proxy"))
    assert r["ok"] is True and proc.returncode == 0


def test_policy_and_checkpoint_actor_kills_with_a_real_job_on_the_workload_ray() -> None:
    """The actors a kill of which must not stop anything: deadline-policy, quota, forecaster
    (restarted by Ray) and a real job's checkpoint actor on the workload Ray (not restarted:
    its job moves on)."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.chaos", "--minutes", "0.5", "--json", "--rate", "2",
         "--kill-every", "2", "--real-jobs", "1", "--drain", "60", "--seed", "5",
         "--kinds", "deadline_policy,quota,forecaster,checkpoint", "--min-kills", "4"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    r = json.loads(proc.stdout)
    assert r["accepted"] > 0 and r["stored"] == r["accepted"], r
    assert (r["lost"], r["duplicated"], r["launched_twice"], r["double_booked"]) == (0, 0, 0, 0)
    assert r["kills_total"] >= 4 and r["survived_total"] == r["kills_total"], r["kills"]
    assert all(r["kills"][k]["kills"] >= 1 for k in ("deadline_policy", "quota", "forecaster", "checkpoint")), \
        r["kills"]
    assert r["ok"] is True and proc.returncode == 0


def test_a_killed_worker_raylet_is_replaced_and_its_job_resumes_from_a_checkpoint() -> None:
    """SIGKILL of the raylet under a running real job on a multi-node workload Ray: the job is
    RUNNING again on another raylet in a later attempt, restored from its checkpoint."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.chaos", "--minutes", "0.2", "--json", "--rate", "1",
         "--tenants", "1", "--kill-every", "1", "--real-jobs", "1", "--drain", "20",
         "--seed", "7", "--kinds", "worker_raylet", "--min-kills", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    r = json.loads(proc.stdout)
    raylet = r["kills"]["worker_raylet"]
    assert raylet["kills"] >= 1 and raylet["survived"] == raylet["kills"], r["kills"]
    assert r["raylet_jobs"] >= 1 and r["raylet_jobs_resumed"] == r["raylet_jobs"], r
    assert r["stored"] == r["accepted"], r
    assert (r["lost"], r["duplicated"], r["launched_twice"], r["double_booked"]) == (0, 0, 0, 0)
    assert r["ok"] is True and proc.returncode == 0
