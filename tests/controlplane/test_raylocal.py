"""A private local Ray accepts Ray jobs even when another process holds Ray's fixed agent port."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import ray

from actors.raylocal import CONTROL_PLANE_NICENESS, control_plane_config
from clusters.rayjobs import submission_client
from controlplane.core.clock import WallClock

SCRIPT = textwrap.dedent(
    """
    import socket, time
    from ray.job_submission import JobSubmissionClient
    from actors.raylocal import init_local_ray

    squatter = socket.socket()
    try:
        squatter.bind(("0.0.0.0", 52365))   # what another Ray's agent would hold
        squatter.listen()
    except OSError:
        pass                                 # already held by some other Ray: same situation
    ctx = init_local_ray(num_cpus=1, include_dashboard=True, log_to_driver=False)
    client = JobSubmissionClient("http://" + ctx.dashboard_url)
    job = client.submit_job(entrypoint="python -c 'print(6 * 7)'")
    deadline = time.time() + 120
    while client.get_job_status(job).is_terminal() is False and time.time() < deadline:
        time.sleep(0.5)
    print(client.get_job_status(job), client.get_job_logs(job).strip())
    """
)


@pytest.mark.slow
@pytest.mark.ray
def test_job_submission_works_beside_another_ray() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    status, _, logs = out.stdout.partition(" ")
    assert status == "SUCCEEDED" and logs.strip().endswith("42"), out.stdout


NICE = "import os, ray; ray.init(); print('nice', ray.get(ray.remote(lambda: os.nice(0)).remote()))"


@pytest.mark.slow
@pytest.mark.ray
def test_the_control_planes_actors_outrank_tenants_code(ray_cluster: object,
                                                       workload_ray: object) -> None:
    """The control plane's Ray runs its workers at nice 0; a workload Ray keeps Ray's 15, so a
    tenant's busy tasks on the same machine cannot starve the controller's ticks. (Both relative
    to the niceness this test runs at, which the Rays' processes inherit.)"""
    import os

    base = os.nice(0)
    @ray.remote(num_cpus=0)
    class Probe:
        def nice(self) -> int:
            import os

            return os.nice(0)

    probe = Probe.remote()  # type: ignore[attr-defined]
    try:
        assert ray.get(probe.nice.remote(), timeout=120) == base + CONTROL_PLANE_NICENESS
        assert CONTROL_PLANE_NICENESS == 0
    finally:
        ray.kill(probe)
    assert control_plane_config({"object_timeout_milliseconds": 5}) == {
        "worker_niceness": 0, "object_timeout_milliseconds": 5}
    assert control_plane_config({"worker_niceness": 5}) == {"worker_niceness": 5}

    client = submission_client(workload_ray.dashboard, workload_ray.token_path)  # type: ignore[attr-defined]
    job = client.submit_job(entrypoint=f'{sys.executable} -c "{NICE}"', entrypoint_num_cpus=0)
    wall = WallClock()
    deadline = wall.now() + 180
    while not client.get_job_status(job).is_terminal() and wall.now() < deadline:
        wall.sleep(0.5)
    logs = client.get_job_logs(job)
    assert str(client.get_job_status(job).value) == "SUCCEEDED", logs[-2000:]
    assert f"nice {min(19, base + 15)}" in logs, logs[-2000:]
