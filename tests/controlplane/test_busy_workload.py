"""A workload cluster whose job API is busy or away delays a job; it never fails it.

Ray's job SDK answers a busy job agent with ``RuntimeError("Request failed with status code
500: No available agent to submit job, please try again later.")`` and a dashboard that does
not answer with a ``requests`` ConnectionError. Both are :func:`clusters.rayjobs.transient`:
the executor raises :class:`Unavailable`, the job stays STARTING on its nodes and the start is
retried next tick, instead of the job being quarantined as FAILED.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import ray
from ray.job_submission import JobSubmissionClient

from actors.execution.submission import died_with_its_node
from actors.jobagent import job_agent_ready
from actors.simexecutor import SimulatedExecutor
from clusters.rayjobs import transient
from clusters.sim import SimulatedFleet
from controlplane.core.clock import SimClock
from controlplane.core.errors import Unavailable
from controlplane.core.models import Job, JobSpec, JobState, Node
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.store import Store

BUSY = "No available agent to submit job, please try again later."


class _JobApi(BaseHTTPRequestHandler):
    """The two routes of Ray's dashboard the job SDK needs to submit: its version, and a
    submission answered with the status the server is set to."""

    answer: tuple[int, str] = (500, BUSY)

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _send(self, code: int, body: str, kind: str = "text/plain") -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.startswith("/api/version"):
            self._send(200, json.dumps({"version": "4", "ray_version": ray.__version__,
                                        "ray_commit": ray.__commit__,
                                        "session_name": "fake"}), "application/json")
        else:
            self._send(404, "not found")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._send(*self.answer)


@pytest.fixture
def job_api() -> Iterator[tuple[str, type[_JobApi]]]:
    handler = type("Api", (_JobApi,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def _submit_error(address: str) -> BaseException:
    with pytest.raises(Exception) as caught:
        JobSubmissionClient(address).submit_job(entrypoint="true", submission_id="s1")
    return caught.value


def test_ray_job_sdk_errors_are_told_apart(job_api: tuple[str, type[_JobApi]]) -> None:
    address, api = job_api
    busy = _submit_error(address)
    assert BUSY in str(busy) and transient(busy)
    api.answer = (503, "the dashboard is restarting")
    assert transient(_submit_error(address))
    api.answer = (400, "runtime_env: invalid pip spec")  # the caller's fault: no retry
    bad = _submit_error(address)
    assert "status code 400" in str(bad) and not transient(bad)
    api.answer = (404, "job not found")
    assert not transient(_submit_error(address))
    with socket.socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(Exception) as refused:
        JobSubmissionClient(closed)
    assert transient(refused.value)
    assert not transient(ValueError("No available agent"))  # only the SDK's own error type


def test_the_job_agent_probe_waits_out_a_busy_agent_and_refuses_a_bad_answer(
    job_api: tuple[str, type[_JobApi]],
) -> None:
    """A busy agent is "not ready" once the probe's time is up; a 4xx is raised, not waited on."""
    address, api = job_api
    assert job_agent_ready(address, timeout_s=0.5) is False
    api.answer = (400, "runtime_env: invalid pip spec")
    with pytest.raises(RuntimeError, match="status code 400"):
        job_agent_ready(address, timeout_s=30.0)


class BusyExecutor(SimulatedExecutor):
    """Simulated progress behind a job API that answers "busy" to the first ``busy`` starts
    (the error Ray's SDK raises, classified as the Ray executor does)."""

    def __init__(self, clock: SimClock, busy: int, cause: BaseException) -> None:
        super().__init__(clock)
        self.busy, self.cause, self.starts = busy, cause, []  # type: list[float]

    def start(self, job: Job, nodes: Sequence[Node]) -> None:
        self.starts.append(self.clock.now())
        if len(self.starts) <= self.busy:
            assert transient(self.cause)
            raise Unavailable(f"the workload cluster did not take job {job.id} ({self.cause})")
        super().start(job, nodes)


def _world(tmp: Path, data_root: Path, busy: int) -> tuple[Store, SimClock, Controller,
                                                          BusyExecutor, Job]:
    clock = SimClock(start=0.0)
    store = Store(tmp / "spotplane.db")
    fleet = SimulatedFleet.from_options(clock=clock, data_dir=data_root, seed=1, gcp=False,
                                        state_path=tmp / "simfleet.db")
    ex = BusyExecutor(clock, busy, RuntimeError(f"Request failed with status code 500: {BUSY}"))
    ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"V100": 2}),
                     executor=ex, epoch=store.take_controller_lease())
    t, _ = store.create_tenant("t")
    job = store.submit_job(t.id, JobSpec(name="busy", kind="spot", compute_hours=0.5,
                                         accelerator="V100", entrypoint="python train.py"),
                           now=0.0)
    return store, clock, ctl, ex, job


def test_a_busy_job_api_delays_the_start_and_fails_nothing(tmp_path: Path,
                                                           data_root: Path) -> None:
    store, clock, ctl, ex, job = _world(tmp_path, data_root, busy=3)
    states = []
    for _ in range(90):  # 1.5 h of 60 s ticks
        clock.advance(60.0)
        ctl.tick()
        states.append(ctl.jobs[job.id].state if job.id in ctl.jobs else store.get_job(job.id).state)
    final = store.get_job(job.id)
    assert final.state is JobState.SUCCEEDED, [e.cause for e in store.job_events(job.id)]
    assert JobState.FAILED not in states
    # three ticks in a row the API was busy, the fourth took it: one tick apart each
    assert len(ex.starts) == 4 and [b - a for a, b in zip(ex.starts, ex.starts[1:], strict=False)] == [60.0] * 3
    first_running = states.index(JobState.RUNNING)
    assert all(s is JobState.STARTING for s in states[first_running - 3:first_running])
    retries = [e for e in store.job_events(job.id) if e.kind == "retry"]
    assert len(retries) == 1 and BUSY in retries[0].cause  # told once, not every tick
    assert store.metrics().get("executor_unavailable_total") == 3.0
    assert not store.quarantined()


def test_a_start_that_is_never_taken_keeps_the_job_waiting(tmp_path: Path,
                                                           data_root: Path) -> None:
    store, clock, ctl, ex, job = _world(tmp_path, data_root, busy=10**6)
    for _ in range(30):
        clock.advance(60.0)
        ctl.tick()
    j = ctl.jobs[job.id]
    assert j.state is JobState.STARTING and j.node_ids and j.progress_hours == 0.0
    assert len(ex.starts) >= 25 and not store.quarantined()


def test_a_start_on_a_dying_node_is_told_from_a_broken_job() -> None:
    """A checkpoint actor that died with its raylet (directly, or through the actor bridge as
    ``RuntimeError("ActorDiedError: ...")``) or was not placed in time: the node is going."""
    assert died_with_its_node(ray.exceptions.ActorDiedError())
    assert died_with_its_node(RuntimeError("ActorDiedError: The actor died because its node died"))
    assert died_with_its_node(TimeoutError("checkpoint actor x was not placed within 120 s"))
    assert not died_with_its_node(RuntimeError("ValueError: bad runtime_env"))
    assert not died_with_its_node(RuntimeError("the ActorDiedError was someone else's"))
