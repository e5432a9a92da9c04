"""Helpers shared by the test modules (imported as ``tests.support``; fixtures stay in conftest)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[1]
TRAIN_SCRIPT = REPO / "examples" / "train_numpy.py"
T = TypeVar("T")


def wait_until(cond: Callable[[], T], timeout: float, what: str, poll: float = 0.05,
               why: Callable[[], str] | None = None) -> T:
    """``cond()``'s first truthy answer, polled every ``poll`` seconds; after ``timeout`` seconds
    an AssertionError naming ``what`` (and what ``why()`` tells, e.g. the job's logs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(poll)
    told = f"\n{why()}" if why is not None else ""
    raise AssertionError(f"timed out after {timeout} s waiting for {what}{told}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load_train() -> types.ModuleType:
    """``examples/train_numpy.py`` as a module (its ``fresh`` and ``step``)."""
    spec = importlib.util.spec_from_file_location("train_numpy", TRAIN_SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def train_reference(steps: int, seed: int) -> dict[str, Any]:
    """The weights ``train_numpy.py`` reaches after ``steps`` uninterrupted steps."""
    t = load_train()
    state = t.fresh(seed)
    for _ in range(steps):
        t.step(state, seed)
    return dict(state)


def require_job_agent(ray_cluster: Any) -> str:
    """The test Ray's dashboard address once its job agent ran a probe job to the end.

    Skips only for a Ray started without a dashboard (no job agent by design). Everything else
    fails: the probe job failing or hanging (``JobAgentBroken`` propagates) and no agent taking
    it at all (``init_local_ray`` gives each Ray's agent its own free port, so no other Ray on
    the machine can hold it: an agent that does not answer is broken).
    """
    import pytest

    from actors.jobagent import job_agent_ready

    url = str(ray_cluster.dashboard_url or "")
    if not url:
        pytest.skip("this Ray was started without a dashboard, so it has no job agent")
    if not job_agent_ready(url):
        pytest.fail(f"no job agent took a probe job at {url} within the probe's time")
    return url


def _child_sessions(pid: int) -> list[int]:
    """The children of ``pid`` that lead sessions of their own (``up``'s supervised child)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [int(c) for c in children if _pgid(int(c)) == int(c)]


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def stop_up(proc: subprocess.Popen[bytes], sig: signal.Signals = signal.SIGTERM,
            timeout: float = 60) -> None:
    """Stop a ``spotplane up`` started with ``start_new_session=True`` however far it got, and
    leak no Ray: ``sig`` to ``up`` (its clean stop), then after ``timeout`` s SIGKILL to its
    whole process group (its Ray's GCS, raylet and workers share it) and to the session of the
    child ``up`` supervises (it runs in a session of its own, so the group's SIGKILL misses it),
    and SIGKILL to whatever of the groups outlived it. SIGINT goes to the group, as a
    terminal's Ctrl-C would."""
    sessions = _child_sessions(proc.pid)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            if sig == signal.SIGINT:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    for group in [proc.pid, *sessions]:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)  # stragglers of a group whose leader has exited


def give_admin_token(state_dir: Path, token: str) -> None:
    """Put ``token`` where ``spotplane up`` reads its admin token (a 0600 file in the state
    directory), as an operator who chooses the token would."""
    from controlplane.client import load_admin_token

    assert load_admin_token(state_dir, create=lambda: token) == token
