"""A real multi-node workload Ray on one machine (``ray.cluster_utils.Cluster``: a head and
worker raylets), for tests and benchmarks of node loss. It runs in a child process with a
scrubbed environment, so it shares nothing with the caller's own (control-plane) Ray. Worker
``i`` declares ``num_gpus`` GPUs, ``spot`` and its own pin resource ``spotplane_slot:<i>``
(what the executor pins a simulated node's replica with).

Child protocol: one JSON line ``{"dashboard", "gcs"}`` on start; then ``remove I`` on stdin
removes worker ``I`` (its raylet and every process on it die, as on a lost spot VM) and answers
``removed I``; ``add`` starts one more worker and answers ``added I``; ``raylet NODE_ID`` answers
``raylet I PID`` (the worker with that Ray node id and its raylet's process id) or ``raylet none``
(the head, or no such node); EOF shuts it down. With ``token`` the cluster requires its own Ray
auth token (``token_path``), as :class:`actors.raylocal.WorkloadRay` does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from actors.raylocal import free_port, new_token_file, scrubbed_env
from controlplane.core.config import REPO_ROOT

__all__ = ["MultiNodeWorkload"]


class MultiNodeWorkload:
    """The child: start it, ``remove(i)`` a worker, ``stop()``."""

    def __init__(self, workers: int = 3, gpus_per_node: int = 1, timeout_s: float = 300.0,
                 *, token: bool = False) -> None:
        from pathlib import Path

        self.home = tempfile.mkdtemp(prefix="spotplane-cluster-home-")
        # its own token at Ray's default path under its HOME: the jobs' drivers find it there
        self.token_path: str | None = (
            str(new_token_file(Path(self.home) / ".ray" / "auth_token")) if token else None)
        env = {**scrubbed_env(self.home, token_path=self.token_path), "PYTHONPATH": str(REPO_ROOT)}
        if self.token_path is None:
            env["RAY_AUTH_MODE"] = "disabled"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "actors.localcluster", str(workers), str(gpus_per_node)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT,
            start_new_session=True)
        info = json.loads(self._line(timeout_s))
        self.dashboard: str = info["dashboard"]
        self.gcs: str = info["gcs"]

    def _line(self, timeout_s: float) -> str:
        import threading

        assert self.proc.stdout is not None
        box: list[str] = []
        reader = threading.Thread(target=lambda: box.append(self.proc.stdout.readline()),  # type: ignore[union-attr]
                                  daemon=True)
        reader.start()
        reader.join(timeout_s)
        if not box or not box[0]:
            self.stop()
            raise RuntimeError(f"the multi-node workload Ray did not answer in {timeout_s} s")
        return box[0].strip()

    def remove(self, worker: int, timeout_s: float = 120.0) -> None:
        """Remove worker ``worker``'s raylet (a node lost under its jobs)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"remove {worker}\n")
        self.proc.stdin.flush()
        assert self._line(timeout_s) == f"removed {worker}"

    def add(self, timeout_s: float = 120.0) -> int:
        """Start one more worker raylet; returns its index (its slot)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("add\n")
        self.proc.stdin.flush()
        answer = self._line(timeout_s)
        assert answer.startswith("added "), answer
        return int(answer.split()[1])

    def raylet(self, node_id: str, timeout_s: float = 60.0) -> tuple[int, int] | None:
        """(worker index, raylet pid) of the worker whose Ray node id is ``node_id``; None for
        the head or an unknown node."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"raylet {node_id}\n")
        self.proc.stdin.flush()
        answer = self._line(timeout_s).split()
        assert answer[:1] == ["raylet"], answer
        return (int(answer[1]), int(answer[2])) if len(answer) == 3 else None

    def stop(self, timeout_s: float = 120.0) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=timeout_s)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=30)
        import shutil

        shutil.rmtree(self.home, ignore_errors=True)


def serve_cluster(workers: int, gpus: int) -> int:
    """The child: a head (no job resources) and ``workers`` worker raylets."""
    from ray.cluster_utils import Cluster

    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything Ray prints goes to stderr
    port = free_port()
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    # Cluster writes the head's address to Ray's default temp dir as well, RAY_TMPDIR/ray: ours,
    # so it never needs nor touches the machine's shared /tmp/ray (absent on a clean machine)
    os.environ["RAY_TMPDIR"] = temp_dir
    os.makedirs(os.path.join(temp_dir, "ray"), exist_ok=True)
    cluster = Cluster(initialize_head=True, connect=False, head_node_args={
        "num_cpus": 1, "include_dashboard": True, "dashboard_port": port,
        "dashboard_host": "127.0.0.1",
        # the head's job agent on a free port: on Ray's fixed 52365 another Ray on the machine
        # may already listen, and every job submission then answers "No available agent"
        "dashboard_agent_listen_port": free_port(),
        # its own temp dir, naming its own GCS: a job's driver resolves "auto" from it, and in
        # the shared /tmp/ray it names whichever Ray started there last (another one's)
        "temp_dir": temp_dir,
        # a busy machine answers health checks late: only a raylet that is gone (its checks
        # refused at once) is marked dead, never a live one that lags; checked every second,
        # a lost raylet is dead in about 5 s (5 refused checks) rather than Ray's 15 s
        "_system_config": {"health_check_timeout_ms": 60_000, "health_check_period_ms": 1000}})
    # ray.init does this, Cluster does not: a job's driver resolves "auto" from this file (else
    # from any GCS process on the machine, maybe another Ray's)
    from ray._private.utils import write_ray_address

    write_ray_address(cluster.gcs_address, temp_dir)

    def worker(i: int) -> Any:
        return cluster.add_node(num_cpus=2, num_gpus=gpus, temp_dir=temp_dir,  # "auto" there too
                                resources={f"spotplane_slot:{i}": 1.0, "spot": 1.0})

    nodes = [worker(i) for i in range(workers)]
    cluster.wait_for_nodes()
    out.write(json.dumps({"dashboard": f"http://127.0.0.1:{port}",
                          "gcs": cluster.gcs_address}) + "\n")
    out.flush()
    try:
        for line in sys.stdin:
            cmd, _, arg = line.strip().partition(" ")
            if cmd == "remove":
                cluster.remove_node(nodes[int(arg)], allow_graceful=False)
                out.write(f"removed {arg}\n")
                out.flush()
            elif cmd == "raylet":
                out.write(f"raylet {_raylet_of(nodes, cluster.worker_nodes, arg)}\n")
                out.flush()
            elif cmd == "add":
                nodes.append(worker(len(nodes)))
                cluster.wait_for_nodes()
                out.write(f"added {len(nodes) - 1}\n")
                out.flush()
    finally:
        cluster.shutdown()
        import shutil

        shutil.rmtree(temp_dir, ignore_errors=True)
    return 0


def _raylet_of(nodes: list[Any], live: Any, node_id: str) -> str:
    """``I PID`` of the live worker with Ray node id ``node_id``, else ``none``."""
    for i, node in enumerate(nodes):
        if node in live and node.node_id == node_id:
            procs = node.all_processes.get("raylet", [])
            if procs and procs[0].process is not None:
                return f"{i} {procs[0].process.pid}"
    return "none"


if __name__ == "__main__":
    sys.exit(serve_cluster(int(sys.argv[1]), int(sys.argv[2])))
