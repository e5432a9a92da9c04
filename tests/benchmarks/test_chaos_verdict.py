"""The chaos benchmark's verdicts: on a job whose raylet was killed (only a later attempt that
restored a checkpoint, ``starting at step K`` with K > 0 in its own logs, counts as resumed), on a
stuck job (one that nothing the loop waits on will move, whatever the time it took) and on the
run as a whole."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from benchmarks.chaos import Kill, _wants_kills, ok, resumed, stuck_jobs, waits_on
from controlplane.core.models import Job, JobKind, JobSpec, JobState
from controlplane.reconcile.contracts import ControllerSettings

SETTINGS = ControllerSettings(pool_nodes={"V100": 4}, default_pool_nodes=2)


def logs(*attempts: tuple[int, str]) -> str:
    return "".join(f"=== attempt {n} of job-1 (replica r0 on node n-{n}) ===\n{text}\n"
                   for n, text in attempts)


def test_a_later_attempt_that_restored_a_checkpoint_is_resumed() -> None:
    text = logs((1, "starting at step 0 of 2400\nstep 300"), (2, "starting at step 280 of 2400"))
    assert resumed(text, after_attempt=1)


def test_a_later_attempt_from_step_zero_is_not_resumed() -> None:
    text = logs((1, "starting at step 0 of 2400\nstep 300"), (2, "starting at step 0 of 2400"))
    assert not resumed(text, after_attempt=1)


def test_the_killed_attempt_itself_never_counts() -> None:
    text = logs((1, "starting at step 0 of 2400"), (2, "starting at step 280 of 2400"))
    assert not resumed(text, after_attempt=2)
    assert not resumed("", after_attempt=0)


def job(state: JobState, nodes: tuple[str, ...] = (), workers: int = 1,
        accelerator: str = "V100", jid: str = "j") -> Job:
    spec = JobSpec(name=jid, kind=JobKind.SPOT, compute_hours=1.0, workers=workers,
                   accelerator=accelerator)
    return Job(id=jid, tenant_id="t", name=jid, kind=spec.kind, spec=spec, submitted_at=0.0,
               state=state, node_ids=list(nodes))


@pytest.mark.parametrize(("state", "nodes", "live", "workers", "accelerator", "want"), [
    (JobState.PENDING, (), set(), 1, "V100", "the loop's ingest"),
    (JobState.PREEMPTED, (), set(), 1, "V100", "the loop's requeue"),
    (JobState.QUEUED, (), set(), 4, "V100", "room in the V100 pool"),  # a full pool: it waits
    (JobState.QUEUED, (), set(), 5, "V100", None),  # more nodes than the pool has: never placed
    (JobState.QUEUED, (), set(), 3, "H100", None),  # the default pool (2 nodes) is too small
    (JobState.STARTING, ("n1", "n2"), {"n2"}, 2, "V100", "its nodes n2"),  # one still coming up
    (JobState.STARTING, ("n1",), set(), 1, "V100", None),  # its node is gone, none requested
    (JobState.RUNNING, ("n1",), {"n1"}, 1, "V100", "its nodes n1"),  # slow, not stuck
    (JobState.RUNNING, ("n1",), {"n9"}, 1, "V100", None),
    (JobState.CHECKPOINTING, (), set(), 1, "V100", None),
])
def test_a_job_is_stuck_only_when_it_waits_on_nothing(
        state: JobState, nodes: tuple[str, ...], live: set[str], workers: int, accelerator: str,
        want: str | None) -> None:
    assert waits_on(job(state, nodes, workers, accelerator), live, SETTINGS) == want


@dataclass
class Node:
    id: str


class FakeStore:
    def __init__(self, jobs: list[Job], live: list[str]) -> None:
        self.jobs, self.live = jobs, live

    def list_jobs(self, tenant: str | None, limit: int) -> list[Job]:
        return self.jobs

    def list_nodes(self, live_only: bool) -> list[Node]:
        assert live_only
        return [Node(n) for n in self.live]


def test_stuck_jobs_are_those_waiting_on_nothing_or_all_unfinished_when_the_loop_stopped() -> None:
    store = FakeStore([job(JobState.RUNNING, ("n1",), jid="slow"),
                       job(JobState.RUNNING, ("n2",), jid="orphan"),
                       job(JobState.QUEUED, jid="queued"),
                       job(JobState.SUCCEEDED, jid="done")], live=["n1"])
    assert [s["id"] for s in stuck_jobs(store, SETTINGS, ticking=True)] == ["orphan"]
    stopped = stuck_jobs(store, SETTINGS, ticking=False)
    assert [s["id"] for s in stopped] == ["slow", "orphan", "queued"]
    assert stopped[0] == {"id": "slow", "state": "RUNNING", "nodes": ["n1"], "message": "",
                          "loop_ticking": False}


def verdict(**changes: Any) -> dict[str, Any]:
    r: dict[str, Any] = {"accepted": 10, "stored": 10, "lost": 0, "duplicated": 0,
                         "launched_twice": 0, "double_booked": 0, "stuck": 0, "stalled": 0,
                         "quarantined": 0, "kills_total": 3, "survived_total": 3,
                         "raylet_jobs": 1, "raylet_jobs_resumed": 1}
    return {**r, **changes}


def test_stalled_jobs_are_no_verdict_but_a_stuck_one_is() -> None:
    assert ok(verdict())
    assert ok(verdict(stalled=7))  # no progress in the drain: a busy machine, not a bug
    assert not ok(verdict(stuck=1))
    assert not ok(verdict(lost=1)) and not ok(verdict(survived_total=2))


def test_min_kills_also_waits_for_a_kind_that_had_nothing_to_kill() -> None:
    kinds = ("controller", "api_replica", "http_proxy")
    three = [Kill("controller", 1, 0.0), Kill("api_replica", 2, 1.0), Kill("controller", 3, 2.0)]
    assert _wants_kills(three, kinds, 3)  # three kills, but the proxy was skipped
    assert not _wants_kills([*three, Kill("http_proxy", 4, 3.0)], kinds, 3)
    assert _wants_kills([Kill(k, i, 0.0) for i, k in enumerate(kinds)], kinds, 4)  # one short
    assert not _wants_kills([], kinds, 0)  # no --min-kills: --minutes alone
