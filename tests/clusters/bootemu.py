"""Boot emulator: every instance a fleet launched runs its actual bootstrap, each in its own
network namespace, so its real ``ray start`` joins a local workload Ray as a separate raylet.

- :class:`Bridge`: a Linux bridge on this host (``10.X.Y.1/24``) that every namespace's veth
  pair hangs on; the workload Ray's head and the API listen on its address.
- :class:`WorkloadHead`: ``ray start --head --block`` on the bridge address with token
  authentication, in its own process group (stopped by that group, never by ``ray stop``).
  Every Ray it or a booted machine starts keeps its files under its own ``RAY_TMPDIR``, so none
  writes ``/tmp/ray/ray_current_cluster``, which a later ``ray.init()`` without an address reads.
- :class:`BootEmulator`: for each instance of the cloud not seen before it fetches the script
  the instance was launched with (EC2 ``UserData`` through boto3, the GCE fake's
  ``startup-script`` item), makes namespace + veth, runs a fake metadata server inside it
  (``169.254.169.254:80``; ``metadata.google.internal`` through the namespace's own
  ``/etc/netns/<ns>/hosts``) and then the script there. An instance the cloud shows terminated
  has every process of its namespace killed and the namespace removed.

Needs root, ``ip`` (iproute2) and bridge support: :func:`require_netns` fails with what is
missing, never skips.
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
METADATA_IP = "169.254.169.254"
ANSWER = "spotplane-answer: "  # the line a test driver answers on (Ray may print beside it)

# the fake metadata server run inside each namespace: state is a directory of small files
# (instance-id, instance-type, notice) the emulator writes; stdlib only
METADATA_SERVER = r'''
import json, sys, pathlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
STATE = pathlib.Path(sys.argv[1])
def read(name):
    p = STATE / name
    return p.read_text() if p.exists() else None
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def answer(self, code, body=""):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("ETag", "e%d" % len(data))
        self.end_headers()
        self.wfile.write(data)
    def do_PUT(self):
        self.answer(200, "imds-session-token") if self.path == "/latest/api/token" else self.answer(404)
    def do_GET(self):
        path = self.path.split("?")[0]
        notice = read("notice")
        if path in ("/latest/meta-data/instance-id", "/computeMetadata/v1/instance/name"):
            self.answer(200, read("instance-id"))
        elif path == "/latest/meta-data/instance-type":
            self.answer(200, read("instance-type") or "")
        elif path == "/latest/meta-data/spot/instance-action":
            self.answer(404) if notice is None else self.answer(200, notice)
        elif path == "/computeMetadata/v1/instance/preempted":
            self.answer(200, "FALSE" if notice is None else "TRUE")
        else:
            self.answer(404)
ThreadingHTTPServer(("169.254.169.254", 80), H).serve_forever()
'''


def ray_tmpdir() -> str:
    """A Ray temp root of its own, short enough for Ray's socket paths (108 bytes at most)."""
    import tempfile

    return tempfile.mkdtemp(prefix="sprt", dir="/tmp")


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """One command; its stderr in the error when it fails."""
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


def require_netns() -> None:
    """Fail (not skip) naming what the emulator needs and this machine lacks."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (network namespaces and veth pairs)")
    if shutil.which("ip") is None:
        missing.append("the ip command (iproute2)")
    elif os.geteuid() == 0:
        probe = f"spbprobe{os.getpid() % 10000}"
        made = run("ip", "netns", "add", probe, check=False)
        if made.returncode != 0:
            missing.append(f"ip netns add: {made.stderr.strip()}")
        else:
            run("ip", "netns", "delete", probe, check=False)
    if missing:
        raise AssertionError("the boot emulator needs " + "; ".join(missing))


@dataclass
class Bridge:
    """A host bridge ``10.X.Y.1/24`` for the namespaces, named after this process."""

    name: str = field(default_factory=lambda: f"spb{os.getpid() % 100000}")
    subnet: str = ""

    def __post_init__(self) -> None:
        used = run("ip", "-4", "-o", "addr").stdout
        rng = random.Random(os.getpid())
        while True:
            self.subnet = f"10.{rng.randrange(100, 250)}.{rng.randrange(0, 255)}"
            if f" {self.subnet}." not in used:
                break
        run("ip", "link", "add", self.name, "type", "bridge")
        run("ip", "addr", "add", f"{self.host}/24", "dev", self.name)
        run("ip", "link", "set", self.name, "up")

    @property
    def host(self) -> str:
        return f"{self.subnet}.1"

    def close(self) -> None:
        run("ip", "link", "delete", self.name, check=False)


class WorkloadHead:
    """The workload cluster's head on the bridge address, with its own Ray token."""

    def __init__(self, bridge: Bridge, workdir: Path, port: int, timeout_s: float = 180.0,
                 dashboard: bool = False) -> None:
        self.tmpdir = ray_tmpdir()
        self.token_file = workdir / "ray_token"
        self.token_file.write_text(os.urandom(32).hex())
        self.token_file.chmod(0o600)
        self.address = f"{bridge.host}:{port}"
        self.log = workdir / "head.log"
        self.dashboard_url = ""
        ui = ["--include-dashboard=false"]
        if dashboard:  # Ray's job API on the bridge; its agent on a free port (not 52365)
            dash = free_port()
            self.dashboard_url = f"http://{bridge.host}:{dash}"
            ui = ["--include-dashboard=true", f"--dashboard-host={bridge.host}",
                  f"--dashboard-port={dash}", f"--dashboard-agent-listen-port={free_port()}"]
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "ray"), "start", "--head", "--block", f"--node-ip-address={bridge.host}",
             f"--port={port}", "--num-cpus=1", *ui, "--disable-usage-stats",
             "--object-store-memory=80000000"],
            env=self.env(), stdout=self.log.open("wb"), stderr=subprocess.STDOUT,
            start_new_session=True, cwd=workdir)
        deadline = time.monotonic() + timeout_s
        while "resources" not in self.cluster_resources_or_empty():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the workload head did not start: {self.log.read_text()[-2000:]}")
            time.sleep(2)

    def env(self) -> dict[str, str]:
        """A driver's environment for this cluster: its token, nothing of the caller's Ray."""
        keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        return {**keep, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token_file),
                "RAY_TMPDIR": self.tmpdir,
                "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}

    def driver(self, code: str, timeout_s: float = 180.0) -> str:
        """Run ``code`` in a driver connected to this cluster (``ray`` imported, ``ADDRESS``,
        ``answer(value)``): what it answered. Ray's own lines (a node marked dead, a worker's
        log) may interleave with the driver's output on a busy machine, so the answer is the
        one line marked as such."""
        prog = (f"import json, ray\nADDRESS = {self.address!r}\n"
                "ray.init(address=ADDRESS, log_to_driver=False)\n"
                f"def answer(value):\n    print({ANSWER!r} + str(value), flush=True)\n{code}")
        done = subprocess.run([sys.executable, "-c", prog], env=self.env(), capture_output=True,
                              text=True, timeout=timeout_s, check=False, cwd=REPO)
        if done.returncode != 0:
            raise RuntimeError(f"driver failed: {done.stderr[-3000:]}")
        marked = [line[len(ANSWER):] for line in done.stdout.splitlines() if line.startswith(ANSWER)]
        if not marked:
            raise RuntimeError(f"driver answered nothing: {done.stdout[-3000:]}")
        return marked[-1]

    def cluster_resources_or_empty(self) -> str:
        try:
            return self.driver("answer(json.dumps({'resources': ray.cluster_resources()}))", 60)
        except (RuntimeError, subprocess.TimeoutExpired):
            return ""

    def node_ip_of(self, node_id: str) -> str:
        """The address of the Ray node ``node_id``."""
        out = self.driver("answer(json.dumps({n['NodeID']: n['NodeManagerAddress'] for n in ray.nodes()}))")
        return str(json.loads(out).get(node_id, ""))

    def resources(self) -> dict[str, float]:
        """The alive nodes' resources, summed."""
        out = self.driver("answer(json.dumps(ray.cluster_resources()))")
        return dict(json.loads(out))

    def run_pinned(self, resource: str) -> str:
        """Run one task that needs a sliver of ``resource``: the IP of the node it ran on."""
        out = self.driver(
            f"@ray.remote(num_cpus=0, resources={{{resource!r}: 0.001}})\n"
            "def where():\n    return ray.util.get_node_ip_address()\n"
            "answer(ray.get(where.remote(), timeout=120))")
        return out

    def stop(self) -> None:
        """Stop the head's process group (its GCS, raylet and workers)."""
        with _suppress():
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(20)
        with _suppress():
            os.killpg(self.proc.pid, signal.SIGKILL)
        shutil.rmtree(self.tmpdir, ignore_errors=True)


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return True


@dataclass
class Booted:
    """One emulated instance: its namespace, address, metadata state and bootstrap process."""

    instance_id: str
    netns: str
    ip: str
    state: Path
    script: subprocess.Popen[bytes]
    log: Path
    ray_tmp: str = ""  # its Ray's temp root (removed with the namespace)

    def finished(self, timeout_s: float) -> int:
        """Wait for the bootstrap to end; its exit status."""
        return self.script.wait(timeout_s)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def notice(self, body: str) -> None:
        """The metadata server shows a preemption notice from now on."""
        (self.state / "notice").write_text(body)

    def file(self, name: str) -> str:
        """A file the bootstrap wrote in its node's state directory."""
        return (self.state / "node" / self.instance_id / name).read_text()


ScriptOf = Callable[[], Iterator[tuple[str, str, str]]]  # (instance id, type, script) per live instance
Gone = Callable[[str], bool]
IpOf = Callable[[str], str | None]  # an instance's private address as its cloud reports it


class BootEmulator:
    """Boots each new instance's script in a namespace; kills those the cloud says are gone."""

    def __init__(self, bridge: Bridge, workdir: Path, scripts: ScriptOf, gone: Gone,
                 extra_env: dict[str, str] | None = None, ip_of: IpOf | None = None) -> None:
        self.bridge, self.workdir = bridge, workdir
        self.scripts, self.gone = scripts, gone
        self.ip_of = ip_of  # the cloud's private address: the namespace's when on the bridge
        self.extra_env = extra_env or {}
        self.booted: dict[str, Booted] = {}
        self._n = 0

    def boot_new(self) -> list[Booted]:
        """Start the bootstrap of every instance not booted yet."""
        started = []
        for iid, itype, script in self.scripts():
            if iid not in self.booted:
                self.booted[iid] = self._boot(iid, itype, script)
                started.append(self.booted[iid])
        return started

    def console(self, iid: str) -> str:
        """What the instance's bootstrap wrote so far (its serial console); empty if not booted."""
        booted = self.booted.get(iid)
        return booted.output() if booted is not None else ""

    def reap(self) -> list[str]:
        """Kill the namespaces of instances the cloud shows terminated; their ids."""
        ended = [iid for iid in self.booted if self.gone(iid)]
        for iid in ended:
            self._kill(self.booted.pop(iid))
        return ended

    def close(self) -> None:
        for booted in list(self.booted.values()):
            self._kill(booted)
        self.booted.clear()

    def _boot(self, iid: str, itype: str, script: str) -> Booted:
        self._n += 1
        n = self._n
        netns = f"{self.bridge.name}n{n}"
        cloud_ip = self.ip_of(iid) if self.ip_of is not None else None
        on_bridge = bool(cloud_ip and cloud_ip.startswith(f"{self.bridge.subnet}."))
        ip = cloud_ip if on_bridge and cloud_ip else f"{self.bridge.subnet}.{n + 10}"
        state = self.workdir / netns
        (state / "node").mkdir(parents=True)
        (state / "instance-id").write_text(iid)
        (state / "instance-type").write_text(itype)
        host_if, ns_if = f"{self.bridge.name}h{n}", f"{self.bridge.name}v{n}"
        run("ip", "netns", "add", netns)
        etc = Path("/etc/netns") / netns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n{METADATA_IP} metadata.google.internal\n")
        run("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        run("ip", "link", "set", host_if, "master", self.bridge.name, "up")
        run("ip", "link", "set", ns_if, "netns", netns)
        for argv in (["addr", "add", f"{ip}/24", "dev", ns_if], ["link", "set", ns_if, "up"],
                     ["link", "set", "lo", "up"], ["addr", "add", f"{METADATA_IP}/32", "dev", "lo"],
                     ["route", "add", "default", "via", self.bridge.host]):
            run("ip", "-n", netns, *argv)
        subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, "-c", METADATA_SERVER, str(state)],
                         stdout=subprocess.DEVNULL, stderr=(state / "metadata.log").open("wb"),
                         start_new_session=True)
        path = state / "bootstrap.sh"
        path.write_text(script)
        env = {"PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin", "HOME": str(state),
               "LANG": "C.UTF-8", "SPOTPLANE_STATE_DIR": str(state / "node"), "RAY_TMPDIR": ray_tmpdir(),
               **self.extra_env}
        ray_tmp = env["RAY_TMPDIR"]
        log = state / "bootstrap.out"
        self._wait_metadata(netns)
        proc = subprocess.Popen(["ip", "netns", "exec", netns, "bash", str(path)], env=env,
                                stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=state)
        return Booted(iid, netns, ip, state, proc, log, ray_tmp)

    def _wait_metadata(self, netns: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            done = run("ip", "netns", "exec", netns, "curl", "-fsS", "-m", "2", "-X", "PUT",
                       f"http://{METADATA_IP}/latest/api/token", check=False)
            if done.returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"the fake metadata server of {netns} did not answer")

    def _kill(self, booted: Booted) -> None:
        """Every process of the namespace, then the namespace (its veth goes with it)."""
        for _ in range(5):
            pids = run("ip", "netns", "pids", booted.netns, check=False).stdout.split()
            if not pids:
                break
            for pid in pids:
                with _suppress():
                    os.kill(int(pid), signal.SIGKILL)
            time.sleep(0.3)
        run("ip", "netns", "delete", booted.netns, check=False)
        shutil.rmtree(Path("/etc/netns") / booted.netns, ignore_errors=True)
        if booted.ray_tmp:
            shutil.rmtree(booted.ray_tmp, ignore_errors=True)


# -- the clouds' side: what each instance was launched with --------------------------------------
def ec2_scripts(ec2: Any, cluster: str = "spotplane") -> ScriptOf:
    """Each live instance of the fleet's cluster with its ``UserData`` (through boto3)."""
    def scripts() -> Iterator[tuple[str, str, str]]:
        pages = ec2.describe_instances(Filters=[{"Name": "tag:spotplane:cluster", "Values": [cluster]},
                                                {"Name": "instance-state-name", "Values": ["pending", "running"]}])
        for reservation in pages["Reservations"]:
            for inst in reservation["Instances"]:
                iid = inst["InstanceId"]
                attr = ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")
                data = attr.get("UserData", {}).get("Value")
                if data:
                    yield iid, inst["InstanceType"], base64.b64decode(data).decode()
    return scripts


def ec2_private_ip(ec2: Any) -> IpOf:
    """The instance's ``PrivateIpAddress`` as EC2 reports it (through boto3)."""
    def ip_of(iid: str) -> str | None:
        found = ec2.describe_instances(InstanceIds=[iid])["Reservations"]
        return next((i.get("PrivateIpAddress") for r in found for i in r["Instances"]), None)
    return ip_of


def ec2_gone(ec2: Any) -> Gone:
    """Whether EC2 shows the instance shutting down or terminated."""
    def gone(iid: str) -> bool:
        found = ec2.describe_instances(InstanceIds=[iid])["Reservations"]
        states = [i["State"]["Name"] for r in found for i in r["Instances"]]
        return not states or states[0] in ("shutting-down", "terminated", "stopping", "stopped")
    return gone


def gce_scripts(fake: Any) -> ScriptOf:
    """Each live VM of the Compute fake with its ``startup-script`` metadata item."""
    def scripts() -> Iterator[tuple[str, str, str]]:
        with fake.lock:
            live = [dict(v) for v in fake.instances.values()
                    if v["status"] in ("PROVISIONING", "STAGING", "RUNNING")]
        for inst in live:
            items = {i["key"]: i["value"] for i in inst.get("metadata", {}).get("items", [])}
            if "startup-script" in items:
                yield inst["name"], inst["machineType"].rsplit("/", 1)[-1], items["startup-script"]
    return scripts


def gce_gone(fake: Any) -> Gone:
    """Whether the Compute fake shows the VM deleted, stopping or stopped."""
    def gone(name: str) -> bool:
        with fake.lock:
            found = [v for (_, n), v in fake.instances.items() if n == name]
        return not found or found[0]["status"] in ("STOPPING", "TERMINATED", "SUSPENDING", "SUSPENDED")
    return gone


def gce_private_ip(fake: Any) -> IpOf:
    """The VM's first ``networkIP`` as the Compute fake reports it."""
    def ip_of(name: str) -> str | None:
        with fake.lock:
            found = [v for (_, n), v in fake.instances.items() if n == name]
        nics = found[0].get("networkInterfaces", []) if found else []
        return str(nics[0]["networkIP"]) if nics else None
    return ip_of


def gce_boot_pending(fake: Any) -> None:
    """GCE finishes booting every VM still provisioning or staging (RUNNING)."""
    with fake.lock:
        pending = [n for (_, n), v in fake.instances.items() if v["status"] in ("PROVISIONING", "STAGING")]
    for name in pending:
        fake.set_status(name, "RUNNING")


@contextmanager
def bridged() -> Iterator[Bridge]:
    """A bridge for emulated machines (failing with what is missing where namespaces cannot be
    made), removed on exit."""
    require_netns()
    made = Bridge()
    try:
        yield made
    finally:
        made.close()


def operator_token(path: Path) -> Path:
    """A workload cluster's Ray token at ``path``, readable by its owner only, as an operator
    keeps it."""
    path.write_text(os.urandom(32).hex())
    path.chmod(0o600)
    return path


def run_while_booting(command: Callable[[], int], boot: Callable[[], None], timeout_s: float = 360.0) -> int:
    """``command()`` (e.g. a CLI's ``main``) in a thread while ``boot()`` runs about every second
    (the cloud boots what is pending, the emulator the new machines' scripts); its answer."""
    answer: list[int] = []
    worker = threading.Thread(target=lambda: answer.append(command()))
    worker.start()
    deadline = time.monotonic() + timeout_s
    while worker.is_alive():
        assert time.monotonic() < deadline, f"the command did not return within {timeout_s:g} s"
        boot()
        worker.join(1.0)
    assert answer, "the command raised (its traceback is above)"
    return answer[0]


def booted_ok(booted: Booted, timeout_s: float = 240.0) -> None:
    """The bootstrap ended well (its output in the failure otherwise)."""
    rc = booted.finished(timeout_s)
    assert rc == 0, booted.output()[-4000:]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


__all__ = ["BootEmulator", "Booted", "Bridge", "WorkloadHead", "booted_ok", "bridged", "operator_token",
           "run_while_booting", "ec2_gone", "ec2_private_ip",
           "ec2_scripts",
           "free_port", "gce_boot_pending", "gce_gone", "gce_private_ip", "gce_scripts", "require_netns", "run"]
