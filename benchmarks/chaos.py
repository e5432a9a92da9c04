"""Chaos: sustained submissions through the HTTP API while ``kill -9`` hits the control plane.

``python -m benchmarks.chaos [--minutes N] [--json] [--tenants 4] [--rate 4] [--real-jobs 2]
[--kinds controller,http_proxy,...] [--min-kills K]``
starts a private local Ray, the control plane (simulated fleet, deadline policies in their own
actors, quota and forecaster actors, the Ray job executor for real jobs) and the Serve API over a
fresh store, and for real jobs a second local Ray, the workload cluster, with its own Ray token
(as under ``spotplane up``): with the ``worker_raylet`` kind a multi-node one
(:class:`actors.localcluster.MultiNodeWorkload`: a head and one GPU worker raylet per real job
plus a spare), else one head raylet (``WorkloadRay``). Several tenants submit spot, HP and
deadline jobs (and a few real ``examples/train_numpy.py`` jobs, checkpointing, that run the whole
run) through the API for N minutes while a killer sends SIGKILL, one at a time, to:

- the controller actor's worker process, the API replica, the HTTP proxy, a deadline-policy
  actor, the quota and forecaster actors (Ray or Serve restarts them): recovered when each
  answers again (the controller also ticks again);
- a checkpoint actor of a real job (not restarted): recovered when its job moves on;
- the raylet of the worker node a running, checkpointed real job's Ray job runs on (its node
  found through Ray's job and state APIs): the node's processes die with it. Once the workload
  cluster marks the node DEAD, the killer plays the cloud and the autoscaler: it reports the
  node's simulated instance lost (``ControllerActor.node_lost``) and starts a replacement worker
  raylet. Recovered when the job is RUNNING again in a later attempt through the HTTP API; at
  the end its logs must show that attempt restored from a checkpoint (``starting at step K``,
  K > 0) and its progress above 0.

Then it lets the jobs finish and checks: accepted = stored, no job lost or duplicated, no node
launched twice per launch intent, no node (GPU) held by two jobs, no job stuck, every raylet-lost
job resumed. A job is stuck when nothing the loop waits on can move it (:func:`waits_on`): the
loop ticks no more, or a job holds no live node in a state that needs one, or it is queued for
more nodes than its pool has. A job that merely made no progress during the drain is *stalled*:
a figure of the run (a busy machine makes them), not a broken invariant.

The HTTP proxy is restarted by the Serve controller's health check (Ray 2.60: every
``RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S`` = 10 s, unhealthy after 3 failures in a row, so ~20-30 s
of refused connections); :func:`actors.raylocal.init_local_ray` sets the period to 1 s.
The control plane's own head raylet is not killed: that ends its whole cluster by design.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from actors.execution import ExecutorConfig
from actors.localcluster import MultiNodeWorkload
from actors.raylocal import WorkloadAddress, WorkloadRay, free_port, init_local_ray
from actors.runtime import RuntimeSettings, start_control_plane, stop_control_plane
from clusters.rayjobs import submission_client
from controlplane.cli.demo import real_job as demo_job
from controlplane.core.models import Job, JobState
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.store import Store
from serve.app import start_api, stop_api
from serve.auth import new_admin_token

KINDS = ("controller", "api_replica", "http_proxy", "deadline_policy", "quota", "forecaster",
         "checkpoint", "worker_raylet")
TITLES = {"api_replica": "ray::ServeReplica:", "http_proxy": "ray::ProxyActor",
          "quota": "ray::QuotaAllocatorActor", "forecaster": "ray::ForecasterActor",
          "checkpoint": "ray::CheckpointCoordinator", "deadline_policy": "ray::DeadlinePolicyActor",
          "controller": "ray::ControllerActor"}
TARGET_PROXY_S = 10.0
NAMESPACE = "spotplane-chaos"


@dataclass
class Kill:
    kind: str
    pid: int
    at: float
    recover_s: float | None = None  # None: not recovered within the limit


@dataclass
class Load:
    """What the submitting clients saw."""

    accepted: dict[str, str] = field(default_factory=dict)  # job id -> unique name
    sent: int = 0
    unanswered: list[str] = field(default_factory=list)  # names whose POST got no answer
    refused: int = 0  # 4xx answers
    retries: int = 0  # repeated POSTs of one submission (same Idempotency-Key)
    replayed: int = 0  # 201s that were the stored first answer of an earlier try
    errors: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)


# -- processes of OUR Ray only ----------------------------------------------------------------
def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _title(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


WORKLOAD_ROOTS: set[int] = set()  # the workload Ray's launcher (its raylet and workers below it)


def our_raylets() -> list[int]:
    """The raylet process(es) of the Ray this driver started."""
    import ray

    node = ray._private.worker._global_node
    procs: list[Any] = node.all_processes.get("raylet", []) if node is not None else []
    return [p.process.pid for p in procs if p.process is not None]


def our_workers() -> dict[int, str]:
    """pid -> process title of every process under our raylet or under the workload Ray we
    started (where real jobs and their checkpoint actors run), never another Ray's."""
    roots = set(our_raylets()) | WORKLOAD_ROOTS
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    parent = {p: _ppid(p) for p in pids}
    out: dict[int, str] = {}
    for p in pids:
        q, seen = parent.get(p, -1), 0
        while q > 1 and q not in roots and seen < 8:
            q, seen = parent.get(q, -1), seen + 1
        if q in roots:
            out[p] = _title(p)
    return out


def pids_of(kind: str) -> list[int]:
    prefix = TITLES[kind]
    return sorted(p for p, t in our_workers().items() if t.startswith(prefix))


# -- the load ---------------------------------------------------------------------------------
def _body(rng: random.Random, name: str) -> dict[str, Any]:
    kind = rng.choice(["spot", "spot", "hp", "deadline"])
    hours = round(rng.uniform(0.1, 0.6), 3)
    body: dict[str, Any] = {"name": name, "kind": kind, "compute_hours": hours,
                            "accelerator": rng.choice(["V100", "V100", "H100"]),
                            "workers": rng.choice([1, 1, 2])}
    if kind == "deadline":
        body["deadline_hours"] = round(hours * 4 + 0.5, 3)
    return body


RETRY_S = 60.0  # how long a client keeps retrying one submission that got no answer


def post_until_answered(client: httpx.Client, body: dict[str, Any], key: str, load: Load,
                        retry_s: float = RETRY_S) -> httpx.Response | None:
    """POST one submission with its ``Idempotency-Key``, retrying the same key after no answer
    or a 5xx (backing off 0.5 s to 4 s), as a careful client does; None if never answered."""
    give_up, wait = time.monotonic() + retry_s, 0.5
    while True:
        try:
            r = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})
        except httpx.HTTPError as exc:
            with load.lock:
                load.errors[type(exc).__name__] += 1
        else:
            if r.status_code < 500:
                return r
            with load.lock:
                load.errors[f"http_{r.status_code}"] += 1
        if time.monotonic() + wait > give_up:
            return None
        with load.lock:
            load.retries += 1
        time.sleep(wait)
        wait = min(4.0, wait * 2)


def submitter(url: str, token: str, tenant: int, per_s: float, stop: threading.Event,
              load: Load, seed: int) -> None:
    """One tenant: a submission every 1/per_s seconds, each retried under its own
    ``Idempotency-Key`` until answered (so a retry after a kill creates nothing twice)."""
    rng = random.Random(seed)
    i = 0
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                      timeout=10.0) as client:
        while not stop.is_set():
            t0 = time.monotonic()
            name = f"chaos-{tenant}-{i}"
            i += 1
            with load.lock:
                load.sent += 1
            r = post_until_answered(client, _body(rng, name), f"{name}-{seed}", load)
            with load.lock:
                if r is None:
                    load.unanswered.append(name)
                elif r.status_code == 201:
                    load.accepted[r.json()["id"]] = name
                    load.replayed += r.headers.get("Idempotent-Replayed") == "true"
                else:
                    load.refused += 1
                    load.errors[f"http_{r.status_code}"] += 1
            stop.wait(max(0.0, 1.0 / per_s - (time.monotonic() - t0)))


def real_job(name: str, steps: int, speed: float, kind: str = "spot") -> dict[str, Any]:
    """``examples/train_numpy.py`` for ``steps`` steps of 0.05 s, as a ``kind`` job."""
    return {**demo_job(name, steps=steps, step_seconds=0.05, speed=speed), "kind": kind}


def _real_kind(i: int, raylet_kills: bool) -> str:
    """Spot, or with worker_raylet kills every other one (the first) HP: on spot, at this speed
    the simulated fleet and HP/deadline placement take a real job's node every few wall seconds,
    so its Ray job seldom runs long enough for a raylet to be killed under it (the spot ones keep
    that churn, and a checkpoint actor's kill its quick way out: a new attempt)."""
    return "hp" if raylet_kills and i % 2 == 0 else "spot"


# -- recovery probes --------------------------------------------------------------------------
def _wants_kills(kills: list[Kill], kinds: tuple[str, ...], min_kills: int) -> bool:
    """Whether ``--min-kills`` asks for more: fewer kills, or a kind not killed yet (a kind
    skipped when it had nothing to kill)."""
    return min_kills > 0 and (len(kills) < min_kills or bool(set(kinds) - {k.kind for k in kills}))


def _until(cond: Callable[[], bool], limit_s: float, every_s: float = 0.1) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        try:
            if cond():
                return time.monotonic() - t0
        except Exception:  # noqa: BLE001 - not yet: the target is still down
            pass
        time.sleep(every_s)
    return None


def _healthy(url: str) -> bool:
    return httpx.get(f"{url}/healthz", timeout=2.0).status_code == 200


class Killer:
    """Sends SIGKILL to one control-plane process at a time and measures its recovery."""

    def __init__(self, url: str, handles: Any, store: Any, rng: random.Random,
                 limit_s: float = 90.0, workload: MultiNodeWorkload | None = None,
                 token: str = "") -> None:
        self.url, self.handles, self.store, self.rng = url, handles, store, rng
        self.limit_s = limit_s
        self.workload, self.token = workload, token  # the multi-node workload; a tenant's token
        self.kills: list[Kill] = []
        self.skipped: Counter[str] = Counter()
        self.lost_jobs: list[LostJob] = []  # real jobs whose raylet was killed

    def kill(self, kind: str) -> Kill | None:
        if kind == "worker_raylet":
            return self.kill_raylet()
        pids = pids_of(kind)
        if not pids:
            self.skipped[kind] += 1
            return None
        pid = self.rng.choice(pids)
        probe = self._probe(kind, pid)
        if probe is None:
            self.skipped[kind] += 1
            return None
        k = Kill(kind, pid, time.monotonic())
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        k.recover_s = _until(probe, self.limit_s)
        self.kills.append(k)
        return k

    def _probe(self, kind: str, pid: int) -> Callable[[], bool] | None:
        import ray

        if kind == "controller":
            ctl = self.handles.controller
            t_before = self.store.control_time()
            return lambda: (ray.get(ctl.pid.remote(), timeout=2) != pid
                            and self.store.control_time() > t_before)
        if kind in ("api_replica", "http_proxy"):
            return lambda: _healthy(self.url)
        if kind == "quota":
            q = self.handles.quota
            return lambda: bool(ray.get(q.usage.remote(), timeout=2) is not None)
        if kind == "forecaster":
            f = self.handles.forecaster
            return lambda: bool(ray.get(f.status.remote(), timeout=2))
        if kind == "deadline_policy":
            handle = self._actor_with_pid("spotplane-deadline-", pid)
            if handle is None:
                return None
            return lambda: ray.get(handle.pid.remote(), timeout=2) != pid
        if kind == "checkpoint":
            return self._checkpoint_probe(pid)
        raise ValueError(kind)

    def _actor_with_pid(self, prefix: str, pid: int) -> Any:
        import ray
        from ray.util import list_named_actors

        for info in list_named_actors(all_namespaces=True):
            name, ns = info["name"], info["namespace"]
            if ns != NAMESPACE or not name.startswith(prefix):
                continue
            with contextlib.suppress(Exception):
                h = ray.get_actor(name, namespace=ns)
                if ray.get(h.pid.remote(), timeout=30) == pid:
                    return h
        return None

    def _checkpoint_probe(self, pid: int) -> Callable[[], bool] | None:
        """A checkpoint actor does not restart: its replica's job must move on without it
        (progress grows, it is re-placed or it finishes; FAILED is no recovery)."""
        running = [j for j in self.store.list_jobs(None, state=["RUNNING", "CHECKPOINTING"],
                                                   limit=100_000) if j.spec.entrypoint]
        if not running:
            return None
        before = {j.id: (j.progress_hours, j.attempts, j.state.value) for j in running}

        def moved() -> bool:
            """Some such job progressed, was re-placed or finished; a FAILED one never counts."""
            for job_id, (progress, attempts, _) in before.items():
                j = self.store.get_job(job_id)
                if j.state.value != "FAILED" and (j.progress_hours > progress
                                                  or j.attempts > attempts
                                                  or j.state.value == "SUCCEEDED"):
                    return True
            return False

        return moved

    # -- worker raylets ------------------------------------------------------------------------
    def kill_raylet(self) -> Kill | None:
        """SIGKILL the raylet of the worker node a running, checkpointed real job's Ray job runs
        on; then, as the cloud and an autoscaler would, report that node's instance lost once
        the workload cluster marks the node DEAD and start a replacement worker raylet.
        Recovered: the job is RUNNING again (HTTP API) in a later attempt."""
        w = self.workload
        found: list[Any] = []  # a new attempt is RUNNING in the store before its Ray job is

        def target_found() -> bool:
            found[:] = [self._raylet_target()]
            return found[0] is not None

        if w is not None:
            _until(target_found, 30.0, every_s=1.0)
        target = found[0] if found else None
        if w is None or target is None:
            self.skipped["worker_raylet"] += 1
            return None
        job, ray_attempt, node_id, (index, pid) = target
        lost = LostJob(job.id, job.attempts, ray_attempt, job.progress_hours)
        k = Kill("worker_raylet", pid, time.monotonic())
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        self.kills.append(k)
        self.lost_jobs.append(lost)
        if _until(lambda: self._node_state(node_id) == "DEAD", self.limit_s, every_s=0.5) is None:
            return k  # never marked dead: not recovered
        w.remove(index)  # reaps what the raylet left (its agents); the node is already gone
        instances = {n.id: n.instance_id for n in self.store.list_nodes()}
        import ray

        for node in job.node_ids:
            if instances.get(node):
                with contextlib.suppress(Exception):  # already reclaimed by the fleet itself
                    ray.get(self.handles.controller.node_lost.remote(
                        instances[node], "its Ray worker raylet was killed"), timeout=30)
        adder = threading.Thread(target=w.add, daemon=True)  # the autoscaler's replacement
        adder.start()
        k.recover_s = _until(lambda: self._running_again(lost), self.limit_s, every_s=0.25)
        adder.join(timeout=300)
        return k

    def _raylet_target(self) -> tuple[Any, int, str, tuple[int, int]] | None:
        """A RUNNING real job with a checkpoint, its Ray job's attempt, driver node and the
        worker (index, raylet pid) of that node; None when there is none."""
        assert self.workload is not None
        jobs = [j for j in self.store.list_jobs(None, state=["RUNNING"], limit=100_000)
                if j.spec.entrypoint and j.checkpoints > 0 and j.progress_hours > 0]
        if not jobs:
            return None
        job = self.rng.choice(jobs)
        client = submission_client(self.workload.dashboard, self.workload.token_path)
        running = [d for d in client.list_jobs()
                   if (d.submission_id or "").startswith(f"spotplane-{job.id}-")
                   and str(d.status.value) == "RUNNING" and d.driver_node_id]
        if not running:
            return None
        ray_job = max(running, key=lambda d: int(str(d.submission_id).rsplit("-", 1)[1]))
        raylet = self.workload.raylet(str(ray_job.driver_node_id))
        if raylet is None:  # its driver is on the head: not a worker to lose
            return None
        attempt = int(str(ray_job.submission_id).rsplit("-", 1)[1])
        return job, attempt, str(ray_job.driver_node_id), raylet

    def _node_state(self, node_id: str) -> str:
        """The workload cluster's view of one node (Ray's state API): ALIVE or DEAD."""
        assert self.workload is not None
        for n in _workload_nodes(self.workload):
            if n["node_id"] == node_id:
                return str(n["state"])
        return "UNKNOWN"

    def _running_again(self, lost: LostJob) -> bool:
        """The job is RUNNING in a later attempt, as its tenant sees it through the HTTP API."""
        r = httpx.get(f"{self.url}/v1/jobs/{lost.job_id}", timeout=5.0,
                      headers={"Authorization": f"Bearer {self.token}"})
        view = r.json()
        return bool(r.status_code == 200 and view["state"] == "RUNNING"
                    and view["attempts"] > lost.attempts)


@dataclass
class LostJob:
    """A real job whose worker raylet was killed, as it stood just before."""

    job_id: str
    attempts: int  # the job's attempts (store)
    ray_attempt: int  # the attempt number of its Ray job that died with the raylet
    progress_hours: float


def _workload_nodes(w: MultiNodeWorkload) -> list[dict[str, Any]]:
    """Every node of the workload cluster (``/api/v0/nodes``, with its own token)."""
    headers = {}
    if w.token_path is not None:
        headers["Authorization"] = f"Bearer {Path(w.token_path).read_text().strip()}"
    r = httpx.get(f"{w.dashboard}/api/v0/nodes", headers=headers, timeout=10.0)
    r.raise_for_status()
    return list(r.json()["data"]["result"]["result"])


_STARTED_AT = re.compile(r"^=== attempt (\d+) of .*?===$|starting at step (\d+)", re.M)


def resumed(logs: str, after_attempt: int) -> bool:
    """Whether an attempt after ``after_attempt`` started from a checkpoint: its own logs say
    ``starting at step K`` with K > 0 (``examples/train_numpy.py`` restores, then prints it)."""
    attempt = 0
    for m in _STARTED_AT.finditer(logs):
        if m.group(1) is not None:
            attempt = int(m.group(1))
        elif attempt > after_attempt and int(m.group(2)) > 0:
            return True
    return False


def resumes(url: str, token: str, lost: list[LostJob], store: Any,
            wait_s: float = 90.0) -> dict[str, Any]:
    """Of the jobs whose raylet was killed: how many came back in a later attempt, restored from
    a checkpoint (their logs through the HTTP API) with progress above 0; each is given up to
    ``wait_s`` for its new attempt to log its start. The others with what was seen."""
    ok, missed = 0, []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                      timeout=60.0) as c:
        for job in lost:
            seen: dict[str, Any] = {}

            def back(job: LostJob = job, seen: dict[str, Any] = seen) -> bool:
                stored = store.get_job(job.job_id)
                logs = c.get(f"/v1/jobs/{job.job_id}/logs").text
                seen.update(attempts=(job.attempts, stored.attempts),
                            progress_hours=(round(job.progress_hours, 4),
                                            round(stored.progress_hours, 4)),
                            starts=re.findall(r"=== attempt \d+|starting at step \d+", logs))
                return (stored.attempts > job.attempts and stored.progress_hours > 0
                        and resumed(logs, job.ray_attempt))

            if _until(back, wait_s, every_s=2.0) is not None:
                ok += 1
            else:
                missed.append({"job": job.job_id, **seen})
    return {"raylet_jobs": len(lost), "raylet_jobs_resumed": ok, "raylet_jobs_missed": missed}


# -- invariants -------------------------------------------------------------------------------
def invariants(store: Any, load: Load, launches_per_intent: dict[str, int]) -> dict[str, Any]:
    """accepted = stored, nothing lost or duplicated, one launch per intent, no double booking."""
    jobs = store.list_jobs(None, limit=10**9)
    stored = {j.id: j for j in jobs}
    names = Counter(j.name for j in jobs)
    lost = [i for i in load.accepted if i not in stored]
    duplicated = sorted(n for n, c in names.items() if c > 1)
    unanswered_stored = sum(1 for n in load.unanswered if names.get(n, 0) == 1)
    counts = {i.id: int(i.payload.get("count", 0)) for i in store.intents("launch")}
    twice = sorted(i for i, n in launches_per_intent.items() if n > counts.get(i, 0))
    holders: dict[str, list[str]] = {}
    for j in jobs:
        if not j.terminal:
            for node_id in j.node_ids:
                holders.setdefault(node_id, []).append(j.id)
    live = store.list_nodes(live_only=True)
    instances = Counter(n.instance_id for n in live if n.instance_id)
    double_booked = sorted([n for n, hs in holders.items() if len(hs) > 1]
                           + [i for i, c in instances.items() if c > 1])
    states = Counter(j.state.value for j in jobs)
    return {"accepted": len(load.accepted), "stored": sum(1 for i in load.accepted if i in stored),
            "lost": len(lost), "duplicated": len(duplicated),
            "unanswered": len(load.unanswered), "unanswered_but_stored": unanswered_stored,
            "launch_intents": len(counts), "launched_twice": len(twice),
            "double_booked": len(double_booked), "states": dict(sorted(states.items())),
            "quarantined": len(store.quarantined()),
            "failed_reasons": dict(Counter(j.message for j in jobs
                                           if j.state.value == "FAILED").most_common(5))}


#: states of a job that the loop moves on its own next tick, whatever else holds
LOOP_MOVES = {JobState.PENDING: "the loop's ingest", JobState.PREEMPTED: "the loop's requeue"}


#: How long the check waits for the loop's next committed tick before it counts every unfinished
#: job as stuck (the loop no longer ticks).
TICK_WAIT_S = 180.0


def waits_on(job: Job, live_nodes: set[str], settings: ControllerSettings) -> str | None:
    """What an unfinished job waits on while the loop ticks, or None when nothing will move it
    (stuck): queued, it waits on room in its pool, unless it needs more nodes than the pool
    has; starting, running or checkpointing, it waits on its live nodes (requested, coming up
    or running its attempt, or being released), and with none the loop has nothing to wait
    for."""
    if job.state in LOOP_MOVES:
        return LOOP_MOVES[job.state]
    if job.state is JobState.QUEUED:
        acc = job.spec.accelerator or ""
        room = settings.pool_nodes.get(acc, settings.default_pool_nodes)
        return f"room in the {acc} pool" if job.nodes_needed <= room else None
    held = [n for n in job.node_ids if n in live_nodes]
    return f"its nodes {', '.join(held)}" if held else None


def stuck_jobs(store: Any, settings: ControllerSettings, ticking: bool) -> list[dict[str, Any]]:
    """The unfinished jobs nothing will move: every one when the loop no longer ticks (``ticking``
    False), else those :func:`waits_on` finds waiting on nothing."""
    live = {n.id for n in store.list_nodes(live_only=True)}
    out = []
    for j in store.list_jobs(None, limit=10**9):
        if j.terminal:
            continue
        if not ticking or waits_on(j, live, settings) is None:
            out.append({"id": j.id, "state": j.state.value, "nodes": list(j.node_ids),
                        "message": j.message, "loop_ticking": ticking})
    return out


def _progress_snapshot(store: Any) -> dict[str, tuple[str, float, int]]:
    return {j.id: (j.state.value, round(j.progress_hours, 6), j.attempts)
            for j in store.list_jobs(None, limit=10**9) if not j.terminal}


def _pct(xs: list[float], q: float) -> float | None:
    return round(float(np.percentile(xs, q)), 2) if xs else None


def summary(kills: list[Kill], skipped: Counter[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in KINDS:
        ks = [k for k in kills if k.kind == kind]
        rec = [k.recover_s for k in ks if k.recover_s is not None]
        out[kind] = {"kills": len(ks), "survived": len(rec), "p50_s": _pct(rec, 50),
                     "p99_s": _pct(rec, 99), "max_s": round(max(rec), 2) if rec else None,
                     "skipped": skipped.get(kind, 0)}
    return out


# -- the run ----------------------------------------------------------------------------------
def run(minutes: float = 3.0, tenants: int = 4, rate: float = 4.0, real_jobs: int = 2,
        kill_every_s: float = 6.0, speed: float = 360.0, drain_s: float = 90.0,
        seed: int = 0, kinds: tuple[str, ...] = KINDS, min_kills: int = 0) -> dict[str, Any]:
    """Start everything, submit and kill for ``minutes`` (and, with ``min_kills``, until that
    many kills and one of each kind were made, at most 5 minutes more), drain, check; the
    ``--json`` dict."""
    import ray


    rng = random.Random(seed)
    state = Path(tempfile.mkdtemp(prefix="spotplane-chaos-"))
    init_local_ray(control_plane=True, namespace=NAMESPACE, num_cpus=4, include_dashboard=False,
                   log_to_driver=False, configure_logging=False)
    handles = None
    api = False
    workload: WorkloadRay | None = None
    nodes: MultiNodeWorkload | None = None
    address: WorkloadAddress | None = None
    try:
        options = ExecutorConfig()
        if real_jobs and "worker_raylet" in kinds:
            # worker raylets to lose: a head and one GPU worker per real job, plus a spare
            nodes = MultiNodeWorkload(workers=real_jobs + 1, gpus_per_node=1, token=True)
            WORKLOAD_ROOTS.add(nodes.proc.pid)
            address = WorkloadAddress(nodes.dashboard, nodes.gcs, nodes.token_path)
        elif real_jobs:  # tenants' jobs run on a Ray of their own, as under `spotplane up`
            workload = WorkloadRay(8, num_cpus=2, home=tempfile.mkdtemp(prefix="spotplane-chaos-home-"))
            WORKLOAD_ROOTS.add(workload.proc.pid)
            address = workload.address
        if address is not None:
            options = ExecutorConfig(artifact_uri=str(state / "artifacts"),
                                     log_dir=str(state / "logs"), package_dir=str(state / "packages"),
                                     workload_address=address.dashboard, workload_gcs=address.gcs,
                                     workload_token_path=address.token_path)
        settings = RuntimeSettings(
            state_dir=state, fleet="sim", speed=speed, clock="sim", namespace=NAMESPACE,
            policy_actor_shards=2, controller=ControllerSettings(),
            executor_factory="actors.execution:make_executor" if real_jobs else None,
            executor_options=options)
        handles = start_control_plane(settings)
        store = Store(settings.db_path)
        tokens = [store.create_tenant(f"chaos-{i}", max_gpus=64)[1] for i in range(tenants)]
        # the real jobs' tenant submits nothing else: within its fair share, its spot job is never
        # reclaimed for another tenant's (the load's tenants), so it runs long enough to be killed
        real_token = store.create_tenant("chaos-real", max_gpus=64)[1]
        url = start_api(settings.db_path, new_admin_token(), free_port(),
                        workload_address=address.dashboard if address else None,
                        workload_token_path=address.token_path if address else None,
                        log_dir=state / "logs")
        api = True
        if _until(lambda: _healthy(url), 120) is None:
            raise RuntimeError("the API did not come up in 120 s")
        print("chaos: processes under our raylet:",
              sorted({t.split(".")[0] for t in our_workers().values()}), file=sys.stderr)
        load, stop = Load(), threading.Event()
        # 0.05 s steps: the real jobs run through the whole run (losses and restores included)
        steps = max(1200, int(minutes * 60 / 0.05))
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {real_token}"},
                          timeout=30.0) as c:
            for i in range(real_jobs):
                r = c.post("/v1/jobs", json=real_job(f"chaos-real-{i}", steps, speed,
                                                     _real_kind(i, nodes is not None)))
                r.raise_for_status()
                load.accepted[r.json()["id"]] = f"chaos-real-{i}"
        threads = [threading.Thread(target=submitter, daemon=True,
                                    args=(url, tok, i, rate / tenants, stop, load, seed + i))
                   for i, tok in enumerate(tokens)]
        for t in threads:
            t.start()
        killer = Killer(url, handles, store, rng, workload=nodes, token=real_token)
        if real_jobs:  # the real-job kinds need one running with a checkpoint (minutes on a busy machine)
            _until(lambda: any(j.spec.entrypoint and j.checkpoints > 0 for j in store.list_jobs(
                None, state=["RUNNING"], limit=100_000)), 300.0, every_s=1.0)
        t_end = time.monotonic() + minutes * 60.0
        t_cap = t_end + 300.0
        order: list[str] = []
        while time.monotonic() < t_end or (_wants_kills(killer.kills, kinds, min_kills)
                                           and time.monotonic() < t_cap):
            if not order:
                order = list(kinds)
                rng.shuffle(order)
            k = killer.kill(order.pop())
            if k is not None:
                print(f"chaos: killed {k.kind} (pid {k.pid}): "
                      f"{'not recovered' if k.recover_s is None else f'back in {k.recover_s:.1f} s'}",
                      file=sys.stderr)
            time.sleep(max(0.0, min(kill_every_s * rng.uniform(0.5, 1.5),
                                    t_end - time.monotonic())))
        stop.set()
        for t in threads:
            t.join(timeout=30)
        before, ticked = _progress_snapshot(store), store.control_time()
        _until(lambda: not _progress_snapshot(store), drain_s, every_s=1.0)
        # a loop is judged stopped only when no tick commits in TICK_WAIT_S: on a loaded machine one
        # tick over every job the run queued may last longer than a short drain
        _until(lambda: store.control_time() > ticked, TICK_WAIT_S, every_s=1.0)
        after = _progress_snapshot(store)
        stalled = [i for i, s in after.items() if before.get(i) == s]
        stuck = stuck_jobs(store, settings.controller, ticking=store.control_time() > ticked)
        launches = ray.get(handles.controller.launches_per_intent.remote(), timeout=60)
        result = invariants(store, load, launches)
        result.update(resumes(url, real_token, killer.lost_jobs, store))
        result.update({
            "minutes": minutes, "tenants": tenants, "sent": load.sent, "refused": load.refused,
            "retries": load.retries, "replayed": load.replayed,
            "errors": dict(load.errors), "unfinished": len(after), "stuck": len(stuck),
            "stuck_jobs": stuck[:10], "stalled": len(stalled),
            "kills": summary(killer.kills, killer.skipped),
            "kills_total": len(killer.kills),
            "survived_total": sum(1 for k in killer.kills if k.recover_s is not None),
            "proxy_health_check_period_s": float(
                os.environ.get("RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S", "10")),
        })
        result["ok"] = ok(result)
        store.close()
        return result
    finally:
        if api:
            with contextlib.suppress(Exception):
                stop_api()
        if handles is not None:
            with contextlib.suppress(Exception):
                stop_control_plane(handles)
        # the control plane's Ray goes before the workload Rays: a controller that outlived a
        # late stop (a tick over hundreds of jobs on a loaded machine) must not tick against them
        ray.shutdown()
        if workload is not None:
            workload.stop()
            WORKLOAD_ROOTS.discard(workload.proc.pid)
        if nodes is not None:
            nodes.stop()
            WORKLOAD_ROOTS.discard(nodes.proc.pid)


def ok(r: dict[str, Any]) -> bool:
    """Every invariant held, every kill was survived and no job was quarantined (FAILED).
    Stalled jobs (no progress during the drain) are no verdict: a loaded machine makes them."""
    return (r["stored"] == r["accepted"] and r["lost"] == 0 and r["duplicated"] == 0
            and r["launched_twice"] == 0 and r["double_booked"] == 0 and r["stuck"] == 0
            and r["quarantined"] == 0
            and r["survived_total"] == r["kills_total"]
            and r["raylet_jobs_resumed"] == r["raylet_jobs"])


def render(r: dict[str, Any]) -> str:
    lines = [f"{'kind':<16} {'kills':>5} {'survived':>8} {'p50 s':>7} {'p99 s':>7} {'max s':>7}"]
    for kind, k in r["kills"].items():
        def f(x: float | None) -> str:
            return "-" if x is None else f"{x:.2f}"

        lines.append(f"{kind:<16} {k['kills']:>5} {k['survived']:>8} {f(k['p50_s']):>7} "
                     f"{f(k['p99_s']):>7} {f(k['max_s']):>7}")
    proxy = r["kills"]["http_proxy"]["p99_s"]
    lines += ["",
              f"{'accepted':<24} {r['accepted']:>8}",
              f"{'stored (of accepted)':<24} {r['stored']:>8}  = accepted "
              f"{'ok' if r['stored'] == r['accepted'] else 'MISSED'}",
              f"{'lost / duplicated':<24} {r['lost']:>4} / {r['duplicated']:<3}",
              f"{'launched twice (intents)':<24} {r['launched_twice']:>8}  of {r['launch_intents']}",
              f"{'double-booked nodes':<24} {r['double_booked']:>8}",
              f"{'unfinished / stuck':<24} {r['unfinished']:>4} / {r['stuck']:<3}",
              f"{'stalled in the drain':<24} {r['stalled']:>8}  (no progress; not a verdict)",
              f"{'quarantined (FAILED)':<24} {r['quarantined']:>8}",
              f"{'unanswered (stored)':<24} {r['unanswered']:>4} ({r['unanswered_but_stored']})",
              f"{'retried / replayed':<24} {r['retries']:>4} / {r['replayed']:<4} "
              "(same Idempotency-Key)",
              f"{'raylet-lost jobs resumed':<24} {r['raylet_jobs_resumed']:>4} / "
              f"{r['raylet_jobs']:<3} (later attempt, from a checkpoint)",
              f"{'proxy recovery p99 s':<24} {proxy if proxy is not None else '-':>8}  "
              f"< {TARGET_PROXY_S:.0f}",
              f"{'all invariants':<24} {'ok' if r['ok'] else 'MISSED':>8}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.chaos",
                                 description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--minutes", type=float, default=3.0, help="how long to submit and kill")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--tenants", type=int, default=4)
    ap.add_argument("--rate", type=float, default=4.0, help="submissions per second, all tenants")
    ap.add_argument("--real-jobs", type=int, default=2, help="train_numpy jobs (checkpoint actors)")
    ap.add_argument("--kill-every", type=float, default=6.0, help="mean seconds between kills")
    ap.add_argument("--speed", type=float, default=360.0, help="simulated s per wall s")
    ap.add_argument("--drain", type=float, default=90.0, help="seconds to let jobs finish")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help=f"what to kill, comma-separated (of {', '.join(KINDS)})")
    ap.add_argument("--min-kills", type=int, default=0,
                    help="keep killing past --minutes until this many kills and one of each "
                         "kind (5 min at most)")
    args = ap.parse_args(argv)
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if not kinds or set(kinds) - set(KINDS):
        print(f"chaos: --kinds: choose from {', '.join(KINDS)}", file=sys.stderr)
        return 2
    if args.minutes <= 0 or args.tenants < 1 or args.rate <= 0:
        print("chaos: --minutes and --rate must be > 0 and --tenants >= 1", file=sys.stderr)
        return 2
    with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the one JSON object
        result = run(args.minutes, args.tenants, args.rate, args.real_jobs, args.kill_every,
                     args.speed, args.drain, args.seed, kinds, args.min_kills)
    print(json.dumps(result) if args.json else render(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
