"""``spotplane up``: local Ray, the control plane's actors, the Serve API, and optionally the demo.

Order of start: the control plane's Ray -> the workload Ray (where tenants' jobs run, started
with a scrubbed environment; docs/security.md) -> control plane (``actors.runtime.start_control_plane``) -> Serve API on
the port -> the endpoint file (URL, the admin token's file, pid; mode 0600) for the other commands. Stop
(Ctrl-C, SIGTERM from ``spotplane down``, or the end of ``--demo --report-json``) runs in the
reverse order and keeps the state directory for the next ``up``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any

from actors.raylocal import WorkloadRay, init_local_ray
from actors.sandbox import OsUser, Sandbox
from clusters.artifacts import OBJECT_SCHEMES
from clusters.providers import provider_entry
from controlplane.client import (
    SpotplaneClient,
    admin_token_file,
    clear_endpoint,
    load_admin_token,
    read_endpoint,
    write_endpoint,
)
from controlplane.core.config import load_settings
from controlplane.core.errors import CloudError, ConfigError, InvalidInput
from controlplane.core.nodecreds import report_secret
from controlplane.core.tokens import hash_token
from controlplane.core.units import DB_FILE, SIMFLEET_DB
from controlplane.core.workloadclusters import LOCAL_CLUSTER, WorkloadClusterSpec, dashboard_url_of
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.store import IN_STORE, BadRow, Store, is_postgres, redact, sqlite_path

log = logging.getLogger(__name__)

DEMO_SPEED = 3600.0  # simulated seconds per wall second for --demo (68 h of deadlines ~ 70 s)
DEFAULT_SPEED = 60.0
DEMO_TIMEOUT_S = 290.0
CHILD_ENV = "SPOTPLANE_UP_CHILD"
EXECUTOR_FACTORY = "actors.execution.multicluster:make_cluster_executor"
# never passed on to the supervised child (and so to nothing it starts): the admin token lives in
# its file, and a variable of the operator's shell must not spread to the control plane's processes
SECRET_ENV = ("SPOTPLANE_ADMIN_TOKEN",)
REAL_JOB_SLOTS = 8  # simulated nodes that may run a real job's replica at once (local Ray)


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def choose_port(requested: int | None, host: str) -> int:
    """``--port`` when given (it must be free); else $SPOTPLANE_PORT/8000, or a free port if taken."""
    if requested is not None:
        if not 1 <= requested <= 65535:
            raise ConfigError(f"port: {requested} is not a TCP port", fix="use 1-65535 (or leave --port out)")
        if not port_is_free(requested, host):
            raise ConfigError(f"port: {requested} is already in use on {host}",
                              fix="pick another --port, or stop what listens there")
        return requested
    default = load_settings().port
    return default if port_is_free(default, host) else free_port(host)


def check_fleet(name: str) -> None:
    """Fail fast, before Ray starts, on a provider that is not registered."""
    provider_entry(name)


def check_not_running(state_dir: Path) -> None:
    recorded = read_endpoint(state_dir)
    if not recorded or not recorded.get("pid"):
        return
    pid = int(recorded["pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        clear_endpoint(state_dir)  # a previous `up` died without cleaning up
        return
    except PermissionError:
        pass
    raise ConfigError(f"spotplane is already up at {recorded.get('url')} (pid {pid}) with state {state_dir}",
                      fix="stop it with `spotplane down`, or use another --state-dir")


def private_dir(state_dir: Path) -> None:
    """The state directory, created if missing, readable by its owner only (0700): it holds the
    store (job env, token hashes), the fleet's database and the endpoint file."""
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    state_dir.chmod(0o700)


def store_target(args: argparse.Namespace, state_dir: Path) -> str | Path:
    """The store ``up`` runs on: ``--db`` or ``$SPOTPLANE_DB`` (a path, ``sqlite:///PATH`` or a
    ``postgresql://`` URL), else the state directory's SQLite file; a bad URL fails here."""
    db = getattr(args, "db", None) or load_settings().db
    if not db:
        return state_dir / DB_FILE
    if not is_postgres(db):
        sqlite_path(db)  # InvalidInput naming `db` for a scheme that is neither
    return str(db)


def move_aside(state_dir: Path) -> None:
    """``--fresh``: keep the old databases under a timestamped name instead of deleting them."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for name in (DB_FILE, SIMFLEET_DB):
        for suffix in ("", "-wal", "-shm"):
            p = state_dir / f"{name}{suffix}"
            if p.exists():
                p.rename(state_dir / f"{name}.{stamp}{suffix}")


class _Stop(Exception):
    """SIGTERM (``spotplane down``) asks ``up`` to stop like Ctrl-C does."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Stop()


def workload_options(args: argparse.Namespace) -> dict[str, str]:
    """The operator's workload cluster: ``--workload-address`` (SPOTPLANE_WORKLOAD_ADDRESS, its
    dashboard), ``--workload-gcs`` (SPOTPLANE_WORKLOAD_GCS) and ``--workload-token``
    (SPOTPLANE_WORKLOAD_TOKEN_PATH, its Ray auth token file); {} when none is given (``up``
    then starts a local one)."""
    env = load_settings()
    address = getattr(args, "workload_address", None) or env.workload_address
    gcs = getattr(args, "workload_gcs", None) or env.workload_gcs
    token = getattr(args, "workload_token", None) or env.workload_token_path
    if not address:
        if gcs or token:
            raise InvalidInput("--workload-address", "is missing",
                               fix="--workload-gcs/--workload-token need the workload cluster's dashboard")
        return {}
    out = {"workload_address": address}
    if gcs:
        out["workload_gcs"] = gcs
    if token:
        out["workload_token_path"] = str(Path(token).expanduser().resolve())
    return out


BOOTING_FLEETS = ("aws", "gcp")  # fleets whose launches carry spotplane's bootstrap


def boot_options(fleet: str, admin_token: str, public_api_url: str | None) -> dict[str, Any]:
    """The fleet options that make launched VMs boot into their region's workload cluster:
    where the nodes report and the secret their launch credentials derive from (none without a
    public API URL, or on a fleet that launches no VMs)."""
    if fleet not in BOOTING_FLEETS or not public_api_url:
        return {}
    return {"api_url": public_api_url, "node_report_secret": report_secret(hash_token(admin_token))}


def executor_options(args: argparse.Namespace, state_dir: Path) -> dict[str, str]:
    """Where real jobs' checkpoint artifacts go: ``--artifacts`` (or SPOTPLANE_ARTIFACTS), a
    directory, ``s3://bucket/prefix`` or ``gs://bucket/prefix``, else ``STATE_DIR/artifacts``."""
    env = load_settings()
    uri = getattr(args, "artifacts", None) or env.artifacts
    endpoint = getattr(args, "s3_endpoint", None) or env.s3_endpoint
    scheme = (uri or "").partition("://")[0] if "://" in (uri or "") else ""
    if scheme and scheme not in OBJECT_SCHEMES:
        raise InvalidInput("--artifacts", f"unsupported URI {uri!r}",
                           fix="use a directory, s3://bucket/prefix or gs://bucket/prefix")
    if endpoint and not scheme:
        raise InvalidInput("--s3-endpoint", "applies to an s3:// or gs:// --artifacts URI only",
                           fix="add --artifacts s3://bucket/prefix, or drop --s3-endpoint")
    out = {"artifact_uri": str(Path(uri).expanduser().resolve()) if uri and "://" not in uri
           else uri or str(state_dir / "artifacts")}
    # what the API stores uploads in, and attempts' logs copied off their nodes: in a
    # PostgreSQL store's blobs table, which the API's replicas reach from any node
    shared = is_postgres(store_target(args, state_dir))
    out["package_dir"] = IN_STORE if shared else str(state_dir / "packages")
    out["log_dir"] = IN_STORE if shared else str(state_dir / "logs")
    if endpoint:
        out["s3_endpoint_url"] = endpoint
    return out


def child_command(args: argparse.Namespace, state_dir: Path, port: int) -> list[str]:
    """The ``spotplane up`` command line the supervisor runs in its own session."""
    cmd = [sys.executable, "-m", "controlplane.cli.main"]
    if getattr(args, "debug", False):
        cmd.append("--debug")
    cmd += ["up", "--state-dir", str(state_dir), "--port", str(port), "--host", args.host, "--fleet", args.fleet]
    if args.demo:
        cmd.append("--demo")
    if args.speed is not None:
        cmd += ["--speed", repr(float(args.speed))]
    if getattr(args, "standby", False):
        cmd.append("--standby")
    for flag in ("lease_ttl", "api_replicas", "zone_observation"):
        if getattr(args, flag, None) is not None:
            cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    if getattr(args, "unsafe_no_sandbox", False):
        cmd.append("--unsafe-no-sandbox")
    if args.report_json:
        cmd += ["--report-json", str(Path(args.report_json).resolve())]
    if args.plot:
        cmd += ["--plot", str(Path(args.plot).resolve())]
    if getattr(args, "artifacts", None):
        cmd += ["--artifacts", str(args.artifacts)]
    if getattr(args, "s3_endpoint", None):
        cmd += ["--s3-endpoint", str(args.s3_endpoint)]
    for flag in ("workload_address", "workload_gcs", "workload_token", "workload_user"):
        if getattr(args, flag, None):
            cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    return cmd


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies


def stop_with_parent(parent: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGTERM (its clean stop) when ``parent`` dies, even by
    SIGKILL, where nothing would forward a signal; where prctl(2) is missing (not Linux) the
    child outlives a killed supervisor and ``spotplane down`` stops it."""
    def arm() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), signal.SIGTERM)
    return arm


def supervise(cmd: list[str], env: dict[str, str]) -> int:
    """Run ``up`` in a child in its own session and turn Ctrl-C / SIGTERM into a clean stop.

    Ctrl-C signals the terminal's whole foreground process group; Ray's own processes (GCS,
    raylet, workers) started by ``up`` would get it too and die under the shutdown. In its own
    session the child (and its Ray) never sees the terminal's SIGINT: the supervisor sends it
    one SIGTERM, on which it stops the API, the control plane and Ray in order. A supervisor
    killed outright stops the child the same way (``stop_with_parent``).
    """
    proc = subprocess.Popen(cmd, env=env, start_new_session=True,
                            preexec_fn=stop_with_parent(os.getpid()))  # noqa: PLW1509 - one thread here

    def forward(signum: int, frame: FrameType | None) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:
                forward(signal.SIGINT, None)
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_up(args: argparse.Namespace) -> int:
    state_dir = Path(args.state_dir).expanduser() if args.state_dir else load_settings().state_dir.expanduser()
    private_dir(state_dir)
    check_not_running(state_dir)
    check_fleet(args.fleet)
    executor_options(args, state_dir)  # a bad --artifacts fails here, before Ray starts
    if workload_sandbox(args, state_dir) is None and not workload_options(args):
        workload_user(args, state_dir, sandboxed=False)  # and a workload that cannot work
    if args.fleet == "ray" and not workload_options(args):
        raise ConfigError("fleet ray: tenants' jobs need a workload Ray cluster other than the control plane's",
                          fix="pass --workload-address (its dashboard) and --workload-gcs (docs/security.md)")
    if args.report_json and not args.demo:
        raise ConfigError("--report-json: only the demo writes a report", fix="add --demo")
    speed = args.speed if args.speed is not None else (DEMO_SPEED if args.demo else DEFAULT_SPEED)
    if speed <= 0:
        raise ConfigError(f"speed: must be > 0, got {speed}", fix="e.g. --speed 3600 (one simulated hour per second)")
    if getattr(args, "api_replicas", 1) < 1:
        raise ConfigError(f"--api-replicas: must be >= 1, got {args.api_replicas}", fix="e.g. --api-replicas 2")
    if getattr(args, "lease_ttl", 10.0) <= 0:
        raise ConfigError(f"--lease-ttl: must be > 0, got {args.lease_ttl}", fix="e.g. --lease-ttl 10")
    db = store_target(args, state_dir)
    if args.fresh:
        if is_postgres(db):
            raise ConfigError("--fresh moves the state directory's SQLite store aside; it cannot "
                              f"empty the PostgreSQL database {redact(str(db))}",
                              fix="point --db at an empty database, or drop and create it")
        move_aside(state_dir)
    port = choose_port(args.port, args.host)
    # deferred: Ray and Serve load only when `up` starts them; every other command starts in under a second
    from serve.auth import new_admin_token

    # read once from its 0600 file (made there the first time): never in an environment, a
    # command line or the log
    admin_token = load_admin_token(state_dir, create=new_admin_token)
    assert admin_token is not None
    if os.environ.get(CHILD_ENV) != "1" and any(k in os.environ for k in SECRET_ENV):
        print(f"spotplane: SPOTPLANE_ADMIN_TOKEN is ignored and not passed on: the admin token is the "
              f"one in {admin_token_file(state_dir)}", file=sys.stderr, flush=True)
    if getattr(args, "data_dir", None):
        os.environ["SPOTPLANE_DATA_DIR"] = str(Path(args.data_dir).expanduser().resolve())
    if os.environ.get(CHILD_ENV) != "1":
        env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
        env.update({CHILD_ENV: "1", "SPOTPLANE_DB": str(db)})  # a URL's password stays out of argv
        return supervise(child_command(args, state_dir, port), env)
    started: dict[str, Any] = {}
    code = 1
    try:
        code = _serve(args, state_dir, port, speed, admin_token, started)
    finally:
        left = _stop(started, state_dir)
        if "Ray" in left:
            # Ray's shutdown still hangs in its thread, which interpreter exit would wait on
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
    # a local Ray took everything it ran down with it; a joined cluster may still run what did not stop
    return 1 if left and args.fleet == "ray" else code


def _serve(args: argparse.Namespace, state_dir: Path, port: int, speed: float, admin_token: str,
           started: dict[str, Any]) -> int:
    """Start everything, then run the demo or serve until Ctrl-C / SIGTERM."""
    try:
        url = _start(args, state_dir, port, speed, admin_token, started)
        if args.demo:
            return _demo(args, url, admin_token, state_dir, speed)
        print("serving until Ctrl-C (or `spotplane down`)", flush=True)
        while True:
            time.sleep(1.0)
    except (KeyboardInterrupt, _Stop):
        print("\nspotplane: stopping (state is kept)", file=sys.stderr, flush=True)
        return 0


def workload_user(args: argparse.Namespace, state_dir: Path, *, sandboxed: bool) -> OsUser | None:
    """The OS account the local workload Ray runs as: ``--workload-user`` (SPOTPLANE_WORKLOAD_USER),
    else, as root in the sandbox, :data:`~actors.sandbox.WORKLOAD_USER` (created if missing);
    None for the control plane's own user. Checked (it exists, is not ours, we are root), with the
    artifact directory made its own."""
    name = getattr(args, "workload_user", None) or load_settings().workload_user
    if name and workload_options(args):
        raise InvalidInput("--workload-user", "applies to the local workload Ray only",
                           fix="run the operator's workload cluster under its own account, or drop "
                               "--workload-address")
    if not name and not (sandboxed and os.geteuid() == 0):
        return None
    user = OsUser.named(name) if name else OsUser.ensure()
    uri = executor_options(args, state_dir)["artifact_uri"]
    if "://" not in uri:
        root = Path(uri).resolve()
        if not sandboxed and root.is_relative_to(state_dir.resolve()):
            raise InvalidInput("--artifacts", f"{root} is inside the state directory, which "
                               f"{user.name!r} cannot enter (0700)",
                               fix="pass --artifacts DIR outside the state directory")
        root.mkdir(parents=True, exist_ok=True)
        user.give(root, tree=root.stat().st_uid != user.uid)  # the whole tree the first time only
    if not sandboxed:
        user.check_runs(sys.executable)
    return user


_CHECKED: set[tuple[str, ...]] = set()  # sandboxes whose runtime was probed in this process


def workload_sandbox(args: argparse.Namespace, state_dir: Path) -> Sandbox | None:
    """The sandbox of the local workload Ray (docs/security.md): a root holding the runtime, its
    own directories and the artifact root only, as :func:`workload_user`; None for an operator's
    cluster (``--workload-address``) and with ``--unsafe-no-sandbox``, which says so loudly.
    Refuses, naming the fix, where bubblewrap is missing or the runtime cannot run inside."""
    if workload_options(args):
        return None
    if getattr(args, "unsafe_no_sandbox", False):
        print("spotplane: WARNING --unsafe-no-sandbox: tenants' jobs run with the control plane's view "
              "of this machine and can read its admin token, store and Ray; trusted tenants only",
              file=sys.stderr, flush=True)
        return None
    user = workload_user(args, state_dir, sandboxed=True)
    uri = executor_options(args, state_dir)["artifact_uri"]
    writable = []
    if "://" not in uri:
        Path(uri).mkdir(parents=True, exist_ok=True)
        writable.append(str(Path(uri).resolve()))
    sandbox = Sandbox.for_workload(writable=writable, hidden=[str(state_dir.resolve())], user=user)
    key = tuple(sandbox.command(["true"], cwd="/"))
    if key not in _CHECKED:  # one probe per process for the same sandbox (validation, then start)
        sandbox.check()
        _CHECKED.add(key)
    return sandbox


def start_ray(fleet: str) -> None:
    """Join the running Ray cluster (``--fleet ray``: one started with ``ray up``/``ray start``),
    else start the control plane's private local Ray (actors and Serve; no tenant code runs
    there: :func:`start_workload`)."""
    import ray

    if fleet == "ray":
        try:
            ray.init(address="auto", namespace="spotplane", log_to_driver=False, configure_logging=False)
        except ConnectionError as exc:
            raise ConfigError(f"fleet ray: no running Ray cluster to join ({exc})",
                              fix="start one with `ray up ray-cluster.yaml` (or set RAY_ADDRESS), "
                                  "or use --fleet sim") from exc
        return

    init_local_ray(control_plane=True, namespace="spotplane", include_dashboard=True,
                   log_to_driver=False, configure_logging=False,
                   num_cpus=max(4, os.cpu_count() or 1))


def start_workload(args: argparse.Namespace, state_dir: Path, started: dict[str, Any]) -> dict[str, str]:
    """The executor's workload options: the operator's cluster (``--workload-address``), else a
    second private local Ray started with a scrubbed environment (HOME a fresh temporary
    directory, outside the state directory, holding its own Ray auth token) and one ``spotplane_slot:<i>`` resource per simulated node
    that may run a real replica at once."""
    given = workload_options(args)
    if given:
        return given

    home = tempfile.mkdtemp(prefix="spotplane-workload-")
    started["workload_home"] = home
    sandbox = workload_sandbox(args, state_dir)
    user = None if sandbox is not None else workload_user(args, state_dir, sandboxed=False)
    workload = WorkloadRay(REAL_JOB_SLOTS, num_cpus=max(4, os.cpu_count() or 1), home=home,
                           user=user, sandbox=sandbox)
    started["workload"] = workload
    out = {"workload_address": workload.address.dashboard, "workload_gcs": workload.address.gcs}
    if workload.address.token_path:
        out["workload_token_path"] = workload.address.token_path
    return out


def _start(args: argparse.Namespace, state_dir: Path, port: int, speed: float, admin_token: str,
           started: dict[str, Any]) -> str:

    # deferred: Ray and Serve load only when `up` starts them; every other command starts in under a second
    from actors.execution.config import ExecutorConfig
    from actors.runtime import RuntimeSettings, start_control_plane
    from serve.app import start_api

    t0 = time.monotonic()
    print(f"spotplane: starting Ray, the control plane ({args.fleet} fleet"
          + (f", x{speed:g} speed" if args.fleet == "sim" else "") + ") and the API...", flush=True)
    with ThreadPoolExecutor(1, thread_name_prefix="workload-ray") as pool:
        # the tenants' Ray (a child process) starts while this process starts its own
        pending = pool.submit(start_workload, args, state_dir, started)
        try:
            start_ray(args.fleet)
        except BaseException:
            with contextlib.suppress(Exception):
                pending.result()  # in `started`: stopped with the rest
            raise
        started["ray"] = True
        workload = pending.result()
    if not getattr(args, "debug", False):
        logging.getLogger("ray.serve").setLevel(logging.WARNING)  # keep the terminal for our table
    if threading.current_thread() is threading.main_thread():
        # after ray.init: Ray's core installs its own SIGTERM handler, which would kill us
        # before the clean shutdown below (`spotplane down` sends SIGTERM)
        signal.signal(signal.SIGTERM, _on_sigterm)
    # Simulated fleet: the controller paces its simulated clock one tick at a time (a slow tick
    # slows the simulation instead of skipping time); real fleets run on wall time.
    # Jobs with an entrypoint run as Ray jobs pinned to their node (docs/execution.md), their
    # checkpoints in the state directory; simulated jobs need no executor.
    db = store_target(args, state_dir)
    homes = executor_options(args, state_dir)
    settings = RuntimeSettings(state_dir=state_dir, db=str(db), fleet=args.fleet, speed=speed,
                               clock="sim" if args.fleet == "sim" else "wall",
                               fleet_options=boot_options(args.fleet, admin_token,
                                                          load_settings().public_api_url),
                               executor_factory=EXECUTOR_FACTORY,
                               executor_options=ExecutorConfig(
                                   artifact_uri=homes["artifact_uri"],
                                   s3_endpoint_url=homes.get("s3_endpoint_url"),
                                   package_dir=homes["package_dir"], log_dir=homes["log_dir"],
                                   workload_address=workload["workload_address"],
                                   workload_gcs=workload.get("workload_gcs"),
                                   workload_token_path=workload.get("workload_token_path")),
                               standby=bool(getattr(args, "standby", False)),
                               lease_ttl_seconds=float(getattr(args, "lease_ttl", 10.0)),
                               controller=ControllerSettings(
                                   zone_observation=getattr(args, "zone_observation", "free")))
    set_aside = quarantined_rows(db)
    try:
        started["control_plane"] = start_control_plane(settings)
    except Exception as exc:  # noqa: BLE001 - the actor's own error, in one line
        lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
        raise CloudError(f"fleet {args.fleet}: the control plane did not start ({lines[-1] if lines else exc!r})",
                         fix="check the provider's credentials and options, or use --fleet sim") from exc
    report_quarantine(quarantined_rows(db, since=set_aside))
    register_local_cluster(db, workload)
    url = start_api(db, admin_token, port, args.host,
                    package_dir=homes["package_dir"],
                    workload_address=workload["workload_address"],
                    workload_token_path=workload.get("workload_token_path"),
                    log_dir=homes["log_dir"], replicas=int(getattr(args, "api_replicas", 1)))
    started["api"] = True
    with SpotplaneClient(url, admin_token) as probe:
        probe.healthz()
    print(f"spotplane is up in {time.monotonic() - t0:.0f} s\n"
          f"  API          {url}   (OpenAPI: {url}/docs)\n"
          f"  dashboard    {url}/   (log in with the admin token below or a tenant's)\n"
          f"  admin token  in {admin_token_file(state_dir)} (mode 0600; `spotplane` commands read it)\n"
          f"  state        {state_dir}"
          + (f" (store: {redact(str(db))})" if is_postgres(db) else "") + "\n"
          f"  try          spotplane jobs --state-dir {state_dir}   |   stop: Ctrl-C or `spotplane down`",
          flush=True)
    write_endpoint(state_dir, url, os.getpid())  # last: it tells others we are ready
    started["endpoint"] = True
    return url


def register_local_cluster(db: str | Path, workload: dict[str, str]) -> None:
    """Register (or refresh) the workload Ray this ``up`` runs jobs on as the cluster ``local``."""
    spec = WorkloadClusterSpec(name=LOCAL_CLUSTER, cloud="local", region="local",
                               dashboard_url=dashboard_url_of(workload["workload_address"]),
                               gcs_address=workload.get("workload_gcs"),
                               token_ref=workload.get("workload_token_path"))
    store = Store(db)
    try:
        store.add_cluster(spec, replace=True)
    finally:
        store.close()


def quarantined_rows(db: str | Path, since: Sequence[BadRow] = ()) -> list[BadRow]:
    """Rows of the store the controller set aside, less those in ``since``."""
    if not is_postgres(db) and not Path(sqlite_path(db)).exists():
        return []
    store = Store(db)
    try:
        known = {(b.table, b.id) for b in since}
        return [b for b in store.quarantined() if (b.table, b.id) not in known]
    finally:
        store.close()


def report_quarantine(rows: Sequence[BadRow], most: int = 20) -> None:
    """Say which stored rows the controller quarantined while it started (one line each)."""
    if not rows:
        return
    print(f"spotplane: quarantined {len(rows)} stored row(s) that do not load (set aside; "
          "the rest runs):", flush=True)
    for bad in rows[:most]:
        print(f"  {bad.describe()}", flush=True)
    if len(rows) > most:
        print(f"  ... and {len(rows) - most} more: "
              + ", ".join(b.id for b in rows[most:]), flush=True)


def _demo(args: argparse.Namespace, url: str, admin_token: str, state_dir: Path, speed: float) -> int:
    # deferred: Ray and Serve load only when `up` starts them; every other command starts in under a second
    from controlplane.cli.demo import Scenario, run_demo, write_report_json

    plot = Path(args.plot) if args.plot else state_dir / "demo.png"
    with SpotplaneClient(url, admin_token) as admin:
        report = run_demo(admin, out=sys.stdout, plot_path=plot, timeout_s=DEMO_TIMEOUT_S,
                          scenario=Scenario.at_speed(speed))
    print("\n" + report.render(), flush=True)
    if args.report_json:
        path = write_report_json(report, args.report_json)
        print(f"report written to {path}", flush=True)
        return 0
    print(f"\nthe demo is done; the API keeps serving at {url} until Ctrl-C (or `spotplane down`)", flush=True)
    while True:
        time.sleep(1.0)


STOP_STEP_S = 30.0  # the most one stop step may take before ``up`` reports it and goes on


def _stop(started: dict[str, Any], state_dir: Path) -> list[str]:
    """Stop what was started, newest first, each step bounded by :data:`STOP_STEP_S`; every step
    tolerates the previous one failing, and a second Ctrl-C or SIGTERM does not cut the stop
    short. Returns the steps that did not finish in time."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if started.pop("endpoint", False):
        clear_endpoint(state_dir)
    steps: list[tuple[str, Callable[[], object]]] = []
    if started.pop("api", False):
        # deferred, as in _start
        from serve.app import stop_api

        steps.append(("the API", stop_api))
    handles = started.pop("control_plane", None)
    if handles is not None:
        # deferred, as in _start
        from actors.runtime import stop_control_plane

        steps.append(("the control plane", lambda: stop_control_plane(handles)))
    workload = started.pop("workload", None)
    if workload is not None:
        steps.append(("the workload Ray", lambda: workload.stop(timeout_s=max(1.0, STOP_STEP_S - 5))))
    left = [what for what, stop in steps if not _step(what, stop)]
    home = started.pop("workload_home", None)
    if home is not None:
        shutil.rmtree(home, ignore_errors=True)
    if started.pop("ray", False):
        import ray

        if not _step("Ray", ray.shutdown):
            left.append("Ray")
    return left


def _step(what: str, stop: Callable[[], object]) -> bool:
    """Run one stop step in a daemon thread for at most :data:`STOP_STEP_S`; say how long it took."""
    t0 = time.monotonic()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            stop()
        except Exception as exc:  # noqa: BLE001 - one step failing must not stop the others
            failed.append(exc)

    worker = threading.Thread(target=run, name=f"stop {what}", daemon=True)
    worker.start()
    worker.join(STOP_STEP_S)
    took = time.monotonic() - t0
    if worker.is_alive():
        print(f"spotplane: stopping {what}: not done after {took:.0f} s, going on", file=sys.stderr, flush=True)
        return False
    if failed:
        log.warning("stopping %s: %s", what, failed[0])
    print(f"spotplane: stopped {what} in {took:.1f} s", file=sys.stderr, flush=True)
    return True
