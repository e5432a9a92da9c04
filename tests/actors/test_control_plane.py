"""The control plane on a real local Ray: deadline job driven by its policy actor through spot
preemptions, an HP job preempting a spot job, and crash tests (controller actor killed, driver
process SIGKILLed) with no job lost, none duplicated and no node launched twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.runtime import RuntimeSettings, start_control_plane, stop_control_plane
from controlplane.core.models import TERMINAL_STATES, JobSpec, JobState
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.store import Store
from tests.support import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
H100_ZONES = ["us-central1-a", "us-central1-b", "us-east4-a", "europe-west1-c"]


def _settings(tmp: Path, **kw: Any) -> RuntimeSettings:
    base: dict[str, Any] = {"state_dir": tmp, "namespace": f"t-{uuid.uuid4().hex[:8]}",
                            "detached": False, "forecaster": False, "speed": 0.0,
                            "autostart": False, "seed": 0}
    base.update(kw)
    return RuntimeSettings(**base)


def _wait_done(store: Store, job_ids: list[str], timeout: float) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        # done: every job terminal and the intents of its last tick (terminations) carried out
        if all(store.get_job(j).state in TERMINAL_STATES for j in job_ids) and not store.pending_intents():
            return
        time.sleep(0.5)
    states = {j: store.get_job(j).state for j in job_ids}
    raise AssertionError(f"jobs not done after {timeout} s: {states}; pending {store.pending_intents()}")


def _assert_exactly_once(store: Store, job_ids: list[str], launches: dict[str, int]) -> None:
    """Every job succeeded once; every launch intent made exactly its count of instances."""
    jobs = store.list_jobs(limit=100_000)
    assert sorted(j.id for j in jobs) == sorted(job_ids)  # none lost, none duplicated
    for j in jobs:
        assert j.state is JobState.SUCCEEDED, (j.id, j.state, j.message)
        done = [e for e in store.job_events(j.id) if e.dst == "SUCCEEDED"]
        assert len(done) == 1
        assert j.progress_hours == pytest.approx(j.spec.compute_hours)
    intents = {i.id: i for i in store.intents("launch")}
    assert store.pending_intents() == []
    for iid, n in launches.items():
        assert n == intents[iid].payload["count"], f"intent {iid} made {n} instances"
    done = [i for i in intents.values() if i.status == "done"]
    assert set(launches) >= {i.id for i in done}
    nodes = [n for n in store.list_nodes() if n.instance_id]
    assert len({n.instance_id for n in nodes}) == len(nodes)  # one node per instance


def test_deadline_job_driven_by_its_policy_actor(ray_cluster: Any, tmp_path: Path) -> None:
    s = _settings(tmp_path, fleet_options={"zones": H100_ZONES},
                  controller=ControllerSettings(pool_nodes={"H100": 4}, tick_seconds=120))
    h = start_control_plane(s)
    try:
        store = Store(s.db_path)
        t, _ = store.create_tenant("dl")
        job = store.submit_job(t.id, JobSpec(name="train", kind="deadline", compute_hours=10,
                                             deadline_hours=11, accelerator="H100",
                                             policy="uniform_progress"), now=0.0)
        ray.get(h.controller.run_for.remote(600))
        names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                 if a["namespace"] == s.namespace}
        assert f"spotplane-deadline-{job.id}" in names
        ray.get(h.controller.run_for.remote(11 * 3600))
        j = store.get_job(job.id)
        assert j.state is JobState.SUCCEEDED and j.deadline_met, j.message
        assert j.preemptions >= 1
        assert j.cost < 0.5 * j.on_demand_cost
        policy = [d for d in store.job_decisions(job.id) if d.policy == "uniform_progress"]
        assert policy and policy[0].action == "spot"
        assert store.policy_state(job.id) is not None  # survives an actor restart
        kinds = [e.dst for e in store.job_events(job.id) if e.kind == "transition"]
        assert kinds.count("PREEMPTED") == j.preemptions
    finally:
        stop_control_plane(h)


def test_hp_job_preempts_spot_job(ray_cluster: Any, tmp_path: Path) -> None:
    s = _settings(tmp_path, policy_actors=False,
                  controller=ControllerSettings(pool_nodes={"V100": 2, "H100": 1}))
    h = start_control_plane(s)
    try:
        store = Store(s.db_path)
        t, _ = store.create_tenant("mix")
        spot = store.submit_job(t.id, JobSpec(name="s", kind="spot", compute_hours=2, workers=2,
                                              accelerator="V100"), now=0.0)
        ray.get(h.controller.run_for.remote(1800))
        hp = store.submit_job(t.id, JobSpec(name="h", kind="hp", compute_hours=0.5,
                                            accelerator="V100"), now=store.control_time())
        ray.get(h.controller.run_for.remote(8 * 3600))
        assert store.get_job(hp.id).state is JobState.SUCCEEDED
        s_job = store.get_job(spot.id)
        assert s_job.state is JobState.SUCCEEDED and s_job.preemptions >= 1
        assert any(e.cause.startswith(f"preempted by hp job {hp.id}")
                   for e in store.job_events(spot.id))
    finally:
        stop_control_plane(h)


def _jobs(store: Store, tenant: str) -> list[str]:
    specs = [JobSpec(name=f"j{i}", kind="spot" if i % 2 else "hp", compute_hours=1 + i % 3,
                     workers=1 + i % 2, accelerator="V100") for i in range(6)]
    return [j.id for j in store.submit_jobs(tenant, specs, now=0.0)]


def test_controller_actor_killed_mid_run(ray_cluster: Any, tmp_path: Path, store_url: str) -> None:
    """On both backends: the actor dies between intents and launches, Ray restarts it, it takes
    the lease and carries the pending intents out; no job lost, none launched twice."""
    s = _settings(tmp_path, db=store_url, policy_actors=False, autostart=True, speed=3600.0,
                  crash_after_intents=2, fleet_options={"gcp": False},
                  controller=ControllerSettings(pool_nodes={"V100": 6}))
    store = Store(s.db_path)
    Store(s.db_path).close()
    t, _ = store.create_tenant("crash")
    ids = _jobs(store, t.id)
    h = start_control_plane(s)
    try:
        # the injected crash (between intents and launches) happens on the 2nd launch tick
        t0 = time.monotonic()
        while not (tmp_path / "crash-injected").exists() and time.monotonic() - t0 < 60:
            time.sleep(0.2)
        assert (tmp_path / "crash-injected").exists()
        # restarted by Ray, took the store's lease again (the dying instance may answer first)
        wait_until(lambda: h.status()["epoch"] == 2, 120, "the restarted controller's lease")
        time.sleep(0.5)
        assert any(store.get_job(i).state not in TERMINAL_STATES for i in ids)
        ray.kill(h.controller, no_restart=False)  # and once more, from outside, mid-run
        _wait_done(store, ids, 120)
        status = h.status()
        assert status["epoch"] >= 3  # two restarts, each took the lease
        _assert_exactly_once(store, ids, ray.get(h.controller.launches_per_intent.remote()))
    finally:
        stop_control_plane(h)


DRIVER = """
import sys, time, ray
from pathlib import Path
from actors.runtime import RuntimeSettings, start_control_plane
from controlplane.reconcile.contracts import ControllerSettings
ray.init(address=sys.argv[1], namespace=sys.argv[3], log_to_driver=False)
s = RuntimeSettings(state_dir=Path(sys.argv[2]), namespace=sys.argv[3], detached=False,
                    forecaster=False, policy_actors=False, speed=3 * 3600.0,
                    fleet_options={"gcp": False},
                    controller=ControllerSettings(pool_nodes={"V100": 6}))
handles = start_control_plane(s)  # hold them: non-detached actors die with their last handle
print("started", flush=True)
time.sleep(600)
"""


def test_driver_process_killed_and_restarted(ray_cluster: Any, tmp_path: Path) -> None:
    store = Store(tmp_path / "spotplane.db")
    t, _ = store.create_tenant("driver")
    ids = _jobs(store, t.id)
    ns = f"t-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, ray_cluster.address_info["gcs_address"],
                             str(tmp_path), ns], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            running = store.list_jobs(state=[JobState.RUNNING, JobState.CHECKPOINTING])
            if running and store.control_time() > 2 * 3600:
                break
            time.sleep(0.2)
        assert any(store.get_job(i).state not in TERMINAL_STATES for i in ids)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    s = _settings(tmp_path, policy_actors=False, autostart=True, speed=3 * 3600.0,
                  fleet_options={"gcp": False}, controller=ControllerSettings(pool_nodes={"V100": 6}))
    h = start_control_plane(s)
    try:
        _wait_done(store, ids, 120)
        _assert_exactly_once(store, ids, ray.get(h.controller.launches_per_intent.remote()))
        assert h.status()["epoch"] >= 2
    finally:
        stop_control_plane(h)
