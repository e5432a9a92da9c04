"""A private local Ray accepts Ray jobs even when another process holds Ray's fixed agent port."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

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
