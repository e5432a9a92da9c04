"""Start a private local Ray that never collides with another Ray on the same machine.

``ray.init()`` picks free ports for everything but the dashboard agent, which always listens on
52365 (``ray start`` has ``--dashboard-agent-listen-port``; ``ray.init`` does not expose it).
With two local Rays on one machine (a test session beside a ``spotplane up`` it spawned, or two
``up``s), the second agent cannot bind and every Ray job submission there fails with "No
available agent". :func:`init_local_ray` gives the agent a free port as well, and the cluster
its own temp dir (so ``address="auto"`` inside it finds it, not the machine's newest Ray).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from actors.sandbox import OsUser, Sandbox

_lock = threading.Lock()
REPO = Path(__file__).resolve().parents[1]

# Serve restarts a dead HTTP proxy only after its health check failed 3 times in a row, one check
# every RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S (Ray's default 10 s: 20-30 s of refused
# connections). Every 1 s brings detection to ~3 s (a new proxy then takes a few seconds to
# start); each check is one cheap actor call.
PROXY_HEALTH_CHECK_PERIOD_S = "1"

# Ray starts its workers (every actor) at nice 15, below anything else on the machine. For the
# control plane's own Ray that puts the controller, policy actors and the API replica behind any
# busy process on the head: its ticks and answers stall. Its workers run at nice 0; a workload
# Ray keeps Ray's 15, so tenants' code on the same machine cannot starve the control plane.
CONTROL_PLANE_NICENESS = 0


def control_plane_config(system_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Ray's ``_system_config`` for a control plane's Ray: ``system_config`` with its workers
    at :data:`CONTROL_PLANE_NICENESS` (unless it sets ``worker_niceness`` itself)."""
    return {"worker_niceness": CONTROL_PLANE_NICENESS, **(system_config or {})}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_local_ray(*, control_plane: bool = False, **kwargs: Any) -> Any:
    """``ray.init(**kwargs)`` for a new local cluster, with free dashboard and agent ports
    (and a 1 s Serve proxy health-check period unless the environment sets one); with
    ``control_plane`` its workers at the control plane's priority (:func:`control_plane_config`)."""
    import ray
    from ray._private import parameter

    if control_plane:
        kwargs["_system_config"] = control_plane_config(kwargs.get("_system_config"))
        private_ray_token()

    kwargs.setdefault("dashboard_port", free_port())
    # Its own temp dir, naming its own GCS: the job supervisor resolves "auto" (the address its
    # jobs' drivers get) from the temp dir's ray_current_cluster, else from any GCS process on
    # the machine, so with several Rays a job could join another Ray (and miss its checkpoint
    # actor, or lose its GCS when that Ray stops).
    temp_dir = kwargs.get("_temp_dir") or tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    kwargs["_temp_dir"] = temp_dir
    # read by the Serve controller's worker: set before Ray starts so every worker inherits it
    os.environ.setdefault("RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S", PROXY_HEALTH_CHECK_PERIOD_S)
    with _lock:
        init = parameter.RayParams.__init__
        names = [n for n, p in inspect.signature(init).parameters.items() if p.default is not p.empty]
        defaults = list(init.__defaults__ or ())
        slot = names.index("dashboard_agent_listen_port")
        saved = defaults[slot]
        defaults[slot] = free_port()
        init.__defaults__ = tuple(defaults)
        try:
            ctx = ray.init(**kwargs)
        finally:
            defaults[slot] = saved
            init.__defaults__ = tuple(defaults)
    # what `ray start` writes and ray.init does not: without it "auto" scans the machine's
    # processes for a GCS and may pick another Ray's
    from ray._private.utils import write_ray_address

    write_ray_address(ray.get_runtime_context().gcs_address, temp_dir)
    return ctx


# ------------------------------------------------------------------------------------------------
# The workload cluster: where tenants' code runs (docs/security.md)
# ------------------------------------------------------------------------------------------------
NUMERIC_PREFIXES = ("OPENBLAS_", "MKL_", "OMP_", "KMP_", "NVPL_", "BLIS_", "NUMEXPR_", "GOTO_")
KEEP_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME",
            "VIRTUAL_ENV", "CUDA_VISIBLE_DEVICES")


def scrubbed_env(home: str | None = None, token_path: str | None = None) -> dict[str, str]:
    """A minimal environment for processes attached to the workload cluster: the system basics
    of :data:`KEEP_ENV` and ``HOME`` (``home`` when given), never a ``SPOTPLANE_*`` secret,
    cloud credentials, or ``RAY_ADDRESS`` / auth token of the control plane's Ray; with
    ``token_path``, Ray authenticates with the workload cluster's own token file."""
    env = {k: v for k, v in os.environ.items() if k in KEEP_ENV or k.startswith(NUMERIC_PREFIXES)}
    env["HOME"] = home if home is not None else os.environ.get("HOME", "/")
    env["PYTHONUNBUFFERED"] = "1"
    if token_path is not None:
        env["RAY_AUTH_MODE"] = "token"
        env["RAY_AUTH_TOKEN_PATH"] = token_path
    return env


@dataclass(frozen=True)
class WorkloadAddress:
    """A workload Ray cluster: its dashboard (job submission), GCS (the actor bridge) and the
    file of its Ray auth token (None: a cluster without token authentication)."""

    dashboard: str
    gcs: str
    token_path: str | None = None


class WorkloadRay:
    """A private local Ray for tenants' jobs, started in a child with a scrubbed environment
    (``python -m actors.raylocal SLOTS NUM_CPUS TEMP_DIR``, ``HOME`` a directory of its own) so
    its raylet, dashboard agent and every job it starts inherit no secret of the process that
    starts it. With ``sandbox`` the child runs in it (:mod:`actors.sandbox`: its own PID
    namespace and a root holding only the runtime and the workload's own directories, as the
    sandbox's user when it has one); with ``user`` alone the child runs as that OS account.
    Its Ray temp dir (sockets, logs) is made here, so drivers outside a sandbox (the actor
    bridge) reach the raylet. ``stop()`` (or the parent's death: the child's stdin closes)
    shuts it down."""

    def __init__(self, slots: int, *, num_cpus: int = 4, home: str | Path,
                 python: str = sys.executable, timeout_s: float = 180.0, attempts: int = 3,
                 user: OsUser | None = None, token: bool = True, sandbox: Sandbox | None = None) -> None:
        # its own Ray token, written once (every start attempt uses the same), at Ray's default
        # path under its HOME: the executor and the actor bridge get its path; the jobs' drivers
        # find it through RAY_AUTH_TOKEN_PATH (a Ray job must join its own cluster)
        token_file = new_token_file(Path(home) / ".ray" / "auth_token") if token else None
        self.temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths
        env = scrubbed_env(str(home), token_path=str(token_file) if token_file else None)
        if token_file is None:
            env["RAY_AUTH_MODE"] = "disabled"
        owner = sandbox.user if sandbox is not None else user
        if owner is not None:
            for path in (home, self.temp_dir, *([token_file.parent, token_file] if token_file else [])):
                owner.give(path)
            env.update(USER=owner.name, LOGNAME=owner.name)
        argv = [python, "-m", "actors.raylocal", str(slots), str(num_cpus), self.temp_dir]
        ids: dict[str, Any] = {}
        if sandbox is not None:
            env["TMPDIR"] = "/tmp"
            sandbox = replace(sandbox, writable=tuple(dict.fromkeys([*sandbox.writable, str(home),
                                                                     self.temp_dir])))
            sandbox.check(python)
            argv = sandbox.command(argv, cwd=REPO)
        elif user is not None:
            user.check_runs(python)
            ids = {"user": user.uid, "group": user.gid, "extra_groups": []}
        self.user = owner
        self.sandbox = sandbox
        for attempt in range(1, attempts + 1):
            # Ray gives a new raylet 30 s to register (hard-coded): a loaded machine misses it
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                start_new_session=True,  # a terminal's Ctrl-C reaches it only through stop()
                cwd=REPO, **ids,  # `-m actors.raylocal` from the checkout, whoever runs it
            )
            assert self.proc.stdout is not None
            line = _read_line(self.proc.stdout, timeout_s)
            if line:
                break
            self._stop(timeout_s=30)
            if attempt == attempts:
                shutil.rmtree(self.temp_dir, ignore_errors=True)
                raise RuntimeError(f"the workload Ray did not start in {attempts} attempts")
        info = json.loads(line)
        self.address = WorkloadAddress(dashboard=info["dashboard"], gcs=info["gcs"],
                                       token_path=str(token_file) if token_file else None)

    def stop(self, timeout_s: float = 60.0) -> None:
        """Shut the workload Ray down (its jobs die with it) and remove its temp dir."""
        try:
            self._stop(timeout_s)
        finally:
            if self.proc.poll() is not None:
                shutil.rmtree(self.temp_dir, ignore_errors=True)

    def _stop(self, timeout_s: float) -> None:
        if self.proc.poll() is not None:
            return
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def new_token_file(path: Path) -> Path:
    """A new random Ray auth token at ``path`` (mode 0600): the workload cluster's own, so no
    process of it can join a Ray that uses another token (the control plane's)."""
    import secrets

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return path


def private_ray_token(path: Path | None = None) -> Path:
    """Ray's default token file (``~/.ray/auth_token``), which a control plane's local Ray
    authenticates with: made here (0600) before Ray would make it readable by everyone, and kept
    0600 in a 0700 directory."""
    path = path or Path.home() / ".ray" / "auth_token"
    if not path.exists():
        new_token_file(path)
    path.parent.chmod(0o700)
    path.chmod(0o600)
    return path


def _read_line(stream: IO[bytes], timeout_s: float) -> str:
    """One line from ``stream``, or "" after ``timeout_s`` / at EOF."""
    box: list[bytes] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return box[0].decode().strip() if box else ""


def serve_workload(slots: int, num_cpus: int, temp_dir: str | None = None) -> int:
    """The child of :class:`WorkloadRay`: start the Ray, print its addresses, wait for stdin EOF."""
    import ray

    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything Ray prints goes to stderr
    try:
        extra: dict[str, Any] = {"_temp_dir": temp_dir} if temp_dir else {}
        ctx = init_local_ray(namespace="spotplane-workload", include_dashboard=True, **extra,
                             log_to_driver=False, configure_logging=False, num_cpus=num_cpus,
                             resources={f"spotplane_slot:{i}": 1.0 for i in range(slots)})
    except Exception:
        ray.shutdown()  # whatever of the cluster did start
        raise
    dashboard = str(ctx.dashboard_url)
    out.write(json.dumps({"dashboard": dashboard if "://" in dashboard else f"http://{dashboard}",
                          "gcs": str(ctx.address_info["gcs_address"])}) + "\n")
    out.flush()
    signal.signal(signal.SIGTERM, _raise_exit)
    try:
        sys.stdin.buffer.read()  # until the parent closes it, dies, or sends SIGTERM
    except (OSError, SystemExit):
        pass
    finally:
        ray.shutdown()
    return 0


def _raise_exit(signum: int, frame: Any) -> None:
    raise SystemExit(0)


if __name__ == "__main__":
    sys.exit(serve_workload(int(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:4]))
