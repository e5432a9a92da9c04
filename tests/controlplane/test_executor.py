"""RayJobExecutor on a real local Ray: real processes killed on "preemption", restored elsewhere."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from actors.execution import ExecutorConfig, RayJobExecutor, ReplicaSpec
from actors.execution.pinning import SlotMap, is_slot, slot_resources
from actors.execution.replicas import RAY_STATUS, ReplicaState
from actors.jobagent import JobAgentBroken, job_agent_ready
from clusters.artifacts import LocalArtifactStore
from controlplane import sdk
from controlplane.core.errors import InvalidInput
from controlplane.core.models import Job, JobSpec
from tests.support import require_job_agent, train_reference, wait_until


def wait_for(
    cond: Callable[[], bool],
    timeout: float,
    what: str,
    ex: RayJobExecutor | None = None,
    job: str = "",
) -> None:
    """:func:`tests.support.wait_until`, telling the job's logs at the timeout."""
    wait_until(cond, timeout, what, poll=0.1,
               why=(lambda: ex.logs(job)[-3000:]) if ex is not None else None)


def assert_same_weights(store: LocalArtifactStore, job_id: str, ref: dict[str, Any]) -> None:
    final = store.restore_latest(job_id)
    assert final is not None and final.ref.progress == 1.0
    state = sdk.loads(final.data)
    assert state["step"] == ref["step"]
    for k in ("w1", "w2", "v1", "v2"):
        assert state[k].tobytes() == ref[k].tobytes(), f"{k} differs from the uninterrupted run"


def test_slots_bind_nodes_and_come_back() -> None:
    assert slot_resources(2) == {"spotplane_slot:0": 1.0, "spotplane_slot:1": 1.0}
    m = SlotMap(["spotplane_slot:0", "spotplane_slot:1"])
    assert m.slot_for("a") == "spotplane_slot:0" and m.slot_for("a") == "spotplane_slot:0"
    assert m.slot_for("b") == "spotplane_slot:1" and m.slot_for("c") is None
    m.release("a")
    assert m.slot_for("c") == "spotplane_slot:0"
    # a placement group's bundles show as derived resources: never slots of their own
    assert is_slot("spotplane_slot:12")
    assert not is_slot("spotplane_slot:2_group_0_e135eb51cacd0ebedaa7fb76ea3701000000")
    assert not is_slot("spotplane_slot:2_group_e135eb51cacd0ebedaa7fb76ea3701000000")
    assert (
        RAY_STATUS["STOPPED"] is ReplicaState.STOPPED
        and RAY_STATUS["PENDING"] is ReplicaState.STARTING
    )


@pytest.fixture(scope="module")
def job_agent(ray_cluster: Any) -> str:
    """The dashboard's job agent (``require_job_agent``: a probe job that fails, hangs or finds
    no agent fails the tests; only a Ray without a dashboard skips)."""
    return require_job_agent(ray_cluster)


@pytest.mark.ray
@pytest.mark.slow
def test_a_probe_job_that_fails_is_a_broken_agent_not_a_skip(job_agent: str) -> None:
    with pytest.raises(JobAgentBroken, match=r"took probe job spotplane-probe-\w+ but it ended "
                                             r"FAILED"):
        job_agent_ready(job_agent, timeout_s=30.0, entrypoint="exit 3")


@pytest.fixture
def executor(job_agent: str, tmp_path: Path) -> Iterator[RayJobExecutor]:
    ex = RayJobExecutor(ExecutorConfig(
        workload_address=job_agent,
        artifact_uri=str(tmp_path / "artifacts"),
        namespace="spotplane-tests",
        hours_per_second=1.0,  # a wall second is a model hour: the DP plans several checkpoints
        stop_timeout_s=20,
    ))
    yield ex
    ex.close()


def _past_checkpoint(status: dict[str, object]) -> bool:
    """The replica runs and its progress is beyond its newest checkpoint."""
    progress, done = status.get("progress"), status.get("checkpointed")
    return (status["state"] == "RUNNING" and isinstance(progress, float)
            and isinstance(done, float) and progress > done)


def _entry(steps: int, seed: int, step_s: float, extra: str = "") -> str:
    return f"python examples/train_numpy.py --steps {steps} --seed {seed} --step-seconds {step_s} {extra}".strip()


@pytest.mark.ray
@pytest.mark.slow
def test_preempted_three_times_with_a_corrupt_artifact_ends_bit_identical(
    executor: RayJobExecutor,
) -> None:
    # 0.1 s a step (40 s a whole run): long enough that a test slowed by a loaded machine still
    # sees each attempt RUNNING past a checkpoint before the attempt could finish on its own
    steps, seed, job, step_s = 400, 5, "job-exact", 0.1
    store = LocalArtifactStore(executor.store.uri[len("file://") :])  # type: ignore[attr-defined]
    entry = _entry(steps, seed, step_s)
    for i, node in enumerate(["node-a", "node-b", "node-c"]):
        before = len(store.list(job))
        rep = executor.start_replica(ReplicaSpec(job, "r0", entry, steps * step_s), node)
        wait_for(
            lambda b=before: len(store.list(job)) >= b + 1,
            180,
            f"a checkpoint on {node}",
            executor,
            job,
        )  # type: ignore[misc]
        wait_for(  # some work past the checkpoint: lost at the preemption
            lambda r=rep: _past_checkpoint(executor.replica_status(r)),
            90,
            f"work past the checkpoint on {node}",
            executor,
            job,
        )  # type: ignore[misc]
        assert executor.replica_status(rep)["state"] == "RUNNING"
        outcome = executor.stop_replica(rep, f"preempted on {node}")
        assert rep.state is ReplicaState.STOPPED
        wait_for(  # Ray may take longer than the executor's stop timeout on a loaded machine
            lambda r=rep: str(executor.client.get_job_status(r.submission_id).value) == "STOPPED",
            90,
            f"Ray to report the job on {node} STOPPED",
            executor,
            job,
        )  # type: ignore[misc]
        assert outcome is not None and outcome["progress_at_death"] < 1.0
        if i == 1:  # damage the newest checkpoint: the next attempt must fall back one
            newest = store.list(job)[-1]
            blob = store.path_of(newest.blob_key)
            blob.write_bytes(blob.read_bytes()[:-8] + b"garbage!")
            previous_step = store.list(job)[-2].meta["step"]
    # the last attempt is never stopped: it runs without the per-step sleep (the only thing
    # --step-seconds changes), so the weights it ends with are the same
    rep = executor.start_replica(
        ReplicaSpec(job, "r0", _entry(steps, seed, 0.0), steps * step_s), "node-d")
    wait_for(
        lambda: executor.replica_status(rep)["state"] in ("SUCCEEDED", "FAILED"),
        240,
        "the last attempt to finish",
        executor,
        job,
    )
    logs = executor.logs(job)
    assert executor.replica_status(rep)["state"] == "SUCCEEDED", logs[-2000:]
    assert_same_weights(store, job, train_reference(steps, seed))
    starts = [
        int(line.split()[3]) for line in logs.splitlines() if line.startswith("starting at step")
    ]
    assert len(starts) == 4 and starts[0] == 0 and all(s > 0 for s in starts[1:]), starts
    assert starts[2] == previous_step  # the corrupt newest artifact was skipped
    kinds = [e.kind for e in store.events(job)]
    assert "corrupt" in kinds and "fallback" in kinds


@pytest.mark.ray
@pytest.mark.slow
def test_emergency_checkpoint_at_a_notice_loses_no_completed_step(executor: RayJobExecutor) -> None:
    """A 30 s notice and a 0.5 s checkpoint: the job saves at once, holds, and is stopped once
    its emergency checkpoint is recorded (a loaded machine may take seconds to get there)."""
    steps, seed, job = 2000, 7, "job-notice"
    store = LocalArtifactStore(executor.store.uri[len("file://") :])  # type: ignore[attr-defined]
    rep = executor.start_replica(
        ReplicaSpec(job, "r0", _entry(steps, seed, 0.01, "--save-seconds 0.5"), steps * 0.01),
        "node-n",
    )
    wait_for(lambda: len(store.list(job)) >= 1, 90, "a first checkpoint")
    executor.notice_replica(rep, 30.0)
    wait_for(lambda: executor.replica_status(rep).get("emergency_done"), 60, "the emergency checkpoint")
    outcome = executor.stop_replica(rep, "preempted after a 30 s notice")
    assert outcome is not None and outcome["noticed"] and outcome["completed_before_death"], outcome
    newest = store.list(job)[-1]
    assert newest.progress == pytest.approx(outcome["checkpointed_progress"])
    assert outcome["lost_progress"] < 1 / steps, outcome  # less than one step of work lost
    assert outcome["checkpoint_completed_at"] - outcome["checkpoint_requested_at"] < 30.0  # within the notice


@pytest.mark.ray
@pytest.mark.slow
def test_two_replicas_survivor_checkpoints_and_replacement_restores_from_it(
    executor: RayJobExecutor,
) -> None:
    steps, seed, job = 300, 11, "job-replicas"
    # every replica of tenant t's job, the replacement included, uses t's artifact prefix
    store = LocalArtifactStore(executor.store_for("t").uri[len("file://") :])  # type: ignore[attr-defined]
    entry = _entry(steps, seed, 0.03)
    r0 = executor.start_replica(ReplicaSpec(job, "r0", entry, steps * 0.03, tenant_id="t"),
                                "zone-a-1")
    r1 = executor.start_replica(ReplicaSpec(job, "r1", entry, steps * 0.03, tenant_id="t"),
                                "zone-b-1")
    wait_for(
        lambda: len(store.list(job, "r0")) >= 1 and len(store.list(job, "r1")) >= 1,
        90,
        "both replicas checkpointing",
    )
    r1_before = len(store.list(job, "r1"))
    t_stop = time.time()
    spec = JobSpec(name="rep", compute_hours=steps * 0.03, replicas=2, entrypoint=entry)
    job_model = Job(id=job, tenant_id="t", name="rep", kind=spec.kind, spec=spec, submitted_at=0.0)
    assert executor.node_preempted(job_model, "zone-a-1", "zone-a preempted")  # r1 survives
    outcome = r0.outcome
    assert outcome is not None and r0.state is ReplicaState.STOPPED
    # seed 004: the survivor checkpoints at once, at the executor's ask, not at its next planned
    # checkpoint: its first save after the ask names the lost peer
    wait_for(lambda: len(store.list(job, "r1")) > r1_before, 60, "the survivor's checkpoint")
    survivor = [r for r in store.list(job, "r1") if r.created_at >= t_stop]
    assert survivor, (store.list(job, "r1"), t_stop)
    wait_for(  # the checkpoint actor answers within 5 s, or a later poll gets it (busy machine)
        lambda: any(str(a.get("reason", "")).startswith("peer r0 lost")
                    for a in executor.replica_status(r1).get("artifacts", [])),
        30,
        "the survivor's checkpoint taken at the executor's ask",
    )
    replacement = executor.start_replacement(job_model, "zone-c-1")
    assert replacement.replica_id == "r0" and replacement.node_id == "zone-c-1"
    wait_for(
        lambda: (
            executor.replica_status(replacement).get("restored_from") is not None
            or executor.replica_status(replacement).get("progress", 0) > 0
        ),
        90,
        "the replacement to restore",
        executor,
        job,
    )
    st = executor.replica_status(replacement)
    wait_for(
        lambda: any(
            r.state is ReplicaState.SUCCEEDED
            for r in (r1, replacement)
            if executor.replica_status(r)
        ),
        120,
        "a replica to finish",
    )
    assert (
        st["progress"] >= survivor[0].progress - 1e-9
    )  # restored from a checkpoint at least as fresh
    assert_same_weights(store, job, train_reference(steps, seed))
    assert r1.attempt == 1 and replacement.attempt == 2
    assert np.isfinite(outcome["progress_at_death"])


def _job(compute_hours: float = 2.0, checkpointed: float = 0.0) -> Any:
    from controlplane.core.models import Job, JobSpec

    spec = JobSpec(
        name="sim", compute_hours=compute_hours, checkpoint_hours=0.05, entrypoint="python x.py"
    )
    return Job(
        id="job-s",
        tenant_id="t",
        name="sim",
        kind=spec.kind,
        spec=spec,
        submitted_at=0.0,
        checkpointed_hours=checkpointed,
    )


def test_simulated_executor_progresses_checkpoints_and_restarts_from_the_checkpoint() -> None:
    from actors.execution import make_executor
    from actors.simexecutor import SimulatedExecutor
    from controlplane.core.clock import SimClock

    clock = SimClock(start=0.0)
    ex = make_executor(ExecutorConfig(kind="simulated"), clock=clock)
    assert isinstance(ex, SimulatedExecutor)
    job = _job()
    ex.start(job, [])
    clock.advance(1.0 * 3600)
    r = ex.poll([job])["job-s"]
    plan = ex.runs["job-s"].plan
    done = [c for c in plan if c < 1.0]
    assert r.progress_hours == pytest.approx(
        1.0 - 0.05 * len(done), abs=1e-6
    )  # each checkpoint pauses 0.05 h
    assert r.checkpoints == len(done) and r.checkpointed_hours == pytest.approx(
        max(done, default=0.0)
    )
    ex.notice(job, 120.0)  # 2 min notice > 3 min checkpoint? no: 0.05 h = 180 s does not fit
    assert ex.poll([job])["job-s"].checkpointed_hours == pytest.approx(max(done, default=0.0))
    ex.notice(job, 600.0)  # fits: checkpoint at the current progress
    assert ex.poll([job])["job-s"].checkpointed_hours == pytest.approx(r.progress_hours)
    ex.stop(job, "preempted")
    assert ex.poll([job]) == {}
    restarted = _job(checkpointed=r.progress_hours)
    ex.start(restarted, [])
    clock.advance(10 * 3600)
    assert ex.poll([restarted])["job-s"].finished
    with pytest.raises(InvalidInput, match="executor_options.kind"):
        make_executor(ExecutorConfig(kind="k8s"), clock=clock)
    with pytest.raises(InvalidInput, match="executor_options.workload_address"):
        make_executor(ExecutorConfig(kind="ray", artifact_uri="/tmp/x"), clock=clock)


EXIT_3 = "python -c 'import sys; sys.exit(3)'"


@pytest.mark.ray
@pytest.mark.slow
def test_a_replica_that_died_with_its_node_is_a_loss_not_a_failure(executor: RayJobExecutor) -> None:
    """A Ray job that ends FAILED while its pinned node is gone from Ray died with the node: the
    job is not failed (the fleet reports the loss and it is restored); on a live node it is."""
    spec = JobSpec(name="dies", compute_hours=0.1, entrypoint=EXIT_3)
    lost = Job(id="job-lost", tenant_id="t", name="dies", kind=spec.kind, spec=spec,
               submitted_at=0.0)
    failed = lost.model_copy(update={"id": "job-failed"})
    reps = {j.id: executor.start_replica(ReplicaSpec(j.id, "r0", EXIT_3, 0.1, tenant_id="t"),
                                         f"node-{j.id}")
            for j in (lost, failed)}
    reps["job-lost"].resource = "spotplane_node:node-job-lost"  # a pin no live Ray node has
    wait_for(lambda: all(executor.replica_status(r)["state"] == "FAILED" for r in reps.values()),
             120, "both Ray jobs to fail")
    report = executor.poll([lost, failed])
    assert report["job-lost"].failed is None and not report["job-lost"].finished
    assert report["job-failed"].failed is not None
    assert report["job-failed"].failed.startswith("replica r0 failed")
    message = report["job-failed"].failed
    assert "exit code 3" in message and len(message) < 1000, message  # Ray's own words, short


def test_a_finished_job_gives_back_only_the_slots_its_live_replicas_hold() -> None:
    """A node whose replica was stopped (slot released) and then bound for another job's
    replica keeps that binding when the first job ends."""
    from actors.execution.pinning import Pinning
    from actors.execution.replicas import Replica, ReplicaBook

    class NoActors:
        def kill(self, name: str) -> None: ...

    ex = RayJobExecutor.__new__(RayJobExecutor)  # only the slot bookkeeping: no Ray needed
    ex.actors = NoActors()  # type: ignore[assignment]
    ex.pinning = Pinning(ex.actors, "auto", "auto")
    slots = ex.pinning.slots = SlotMap(["spotplane_slot:0", "spotplane_slot:1"])
    ex.book = ReplicaBook()
    slot = slots.slot_for("node-x")
    old = Replica("job-a", "r0", "node-x", 1, "sid-a", "a", slot, 0.0, 1.0)
    ex.book.add(old)
    ex.pinning.release(old)  # preempted: stopped and released
    old.state = ReplicaState.STOPPED
    now = slots.slot_for("node-x")  # node-x now serves job b
    ex._cleanup("job-a")  # job a ends (elsewhere)
    assert slots.bound == {"node-x": now}


def test_the_executor_config_pickles_checks_its_choices_and_scales_to_the_clock() -> None:
    """One frozen configuration: Ray pickles it into the controller actor unchanged; a bad
    choice is refused where it is made; model hours per job second follow the clock."""
    import dataclasses
    import pickle

    from controlplane.core.clock import SimClock, WallClock

    config = ExecutorConfig(workload_address="http://head:8265", artifact_uri="/a",
                            env={"SEED": "1"}, package_dir="store")
    assert pickle.loads(pickle.dumps(config)) == config
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.pin = "never"  # type: ignore[misc]
    with pytest.raises(InvalidInput, match="pin"):
        ExecutorConfig(pin="sometimes")
    assert config.retry_s == config.submit_timeout_s == 120.0
    assert ExecutorConfig(submit_retry_s=5.0).retry_s == 5.0
    assert config.scale_on(WallClock()) == pytest.approx(1 / 3600)
    assert config.scale_on(SimClock(speed=3600.0)) == pytest.approx(1.0)
    assert ExecutorConfig(hours_per_second=2.0).scale_on(SimClock(speed=3600.0)) == 2.0


def test_a_replica_spec_is_the_jobs_own() -> None:
    """``ReplicaSpec.of`` carries what the job's spec says a replica runs, and nothing else."""
    job = _job()
    spec = ReplicaSpec.of(job, "r1")
    assert (spec.job_id, spec.replica_id, spec.entrypoint, spec.work_hours, spec.checkpoint_hours,
            spec.gpus, spec.tenant_id) == ("job-s", "r1", "python x.py", 2.0, 0.05,
                                           job.spec.gpus_per_worker, "t")
    with pytest.raises(InvalidInput, match="has no entrypoint"):
        ReplicaSpec.of(job.model_copy(update={"spec": job.spec.model_copy(
            update={"entrypoint": None})}), "r0")


def test_the_factory_keeps_blobs_in_the_store_when_told_or_on_postgresql(tmp_path: Path) -> None:
    """``package_dir`` / ``log_dir``: ``"store"`` is the store's table, a path stays a path, and
    none is the state directory's folder on SQLite."""
    from actors.execution.factory import _blob_home
    from controlplane.core.blobs import Blobs
    from controlplane.store import IN_STORE, PACKAGES, Store

    store = Store(tmp_path / "s.db")
    assert isinstance(_blob_home(IN_STORE, store, PACKAGES, "/d"), Blobs)
    assert _blob_home("/mine", store, PACKAGES, "/d") == "/mine"
    assert _blob_home(None, store, PACKAGES, "/d") == "/d"
    assert _blob_home(None, None, PACKAGES, "/d") == "/d"


def test_a_poll_reports_the_furthest_replica_and_no_news_as_no_change() -> None:
    """The furthest progress and checkpoint any started replica told, the checkpoints of all;
    with no replica started yet the job's own progress stands."""
    from actors.execution.reports import Told

    job = _job(compute_hours=2.0, checkpointed=0.5)
    told = Told.of(job, [{"started": True, "progress": 0.5, "checkpointed": 0.25, "checkpoints": 2},
                         {"started": True, "progress": 0.75, "checkpointed": 0.5, "checkpoints": 1,
                          "plans": 3},
                         {"started": False, "progress": 0.9, "checkpoints": 1}])
    assert told == Told(0.75, 0.5, 4, 3)
    report = told.report(job, finished=False, failed=None, totals=(10, 1))
    assert (report.progress_hours, report.checkpointed_hours, report.checkpoint_bytes,
            report.restore_fallbacks) == (1.5, 1.0, 10, 1)
    assert Told.of(job, [{"state": "STARTING"}]) == Told(0.0, 0.25, 0, 0)


def test_a_booted_node_is_pinned_by_the_instance_id_its_bootstrap_declares() -> None:
    """A node launched with the bootstrap declares ``spotplane_node:<instance id>``: its
    replica is pinned there (its node id's own resource first, when a Ray declares that)."""
    from actors.execution.pinning import Pinning

    class Have:
        def __init__(self, *names: str) -> None:
            self.names = names

        def resources(self) -> dict[str, float]:
            return dict.fromkeys(self.names, 1.0)

    booted = Pinning(Have("spotplane_node:i-0abc", "spot"), "auto", "auto")  # type: ignore[arg-type]
    assert booted.resource_for("node-7", "i-0abc") == "spotplane_node:i-0abc"
    both = Pinning(Have("spotplane_node:i-0abc", "spotplane_node:node-7"), "auto", "auto")  # type: ignore[arg-type]
    assert both.resource_for("node-7", "i-0abc") == "spotplane_node:node-7"
    assert Pinning(Have("spot"), "auto", "auto").resource_for("node-7", "i-0abc") is None  # type: ignore[arg-type]
