"""A real job is given exactly its GPUs by Ray: ``entrypoint_num_gpus`` from ``gpus_per_worker``.

The jobs run on a private Ray in a child process (``gpu_jobs.py``). On a machine without GPUs
that Ray declares two GPUs, which Ray assigns exactly as real ones; on a GPU machine
(``SPOTPLANE_REAL_GPUS=1``) it uses the GPUs Ray finds, and torch must see exactly one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors.executor import RayJobExecutor
from controlplane.core.config import REPO_ROOT
from controlplane.core.errors import InvalidInput


def run_gpu_jobs(tmp_path: Path, fake_gpus: int) -> dict:  # type: ignore[type-arg]
    out = tmp_path / "gpu.json"
    cmd = [sys.executable, str(Path(__file__).with_name("gpu_jobs.py")), "--out", str(out)]
    if fake_gpus:
        cmd += ["--fake-gpus", str(fake_gpus)]
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=420)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def test_unknown_gpu_mode_names_the_choices() -> None:
    with pytest.raises(InvalidInput, match="gpus.*auto, always, never"):
        RayJobExecutor("127.0.0.1:1", "/tmp/x", gpus="some")


@pytest.mark.slow
@pytest.mark.ray
def test_each_job_sees_exactly_its_gpu(tmp_path: Path) -> None:
    real = os.environ.get("SPOTPLANE_REAL_GPUS") == "1"
    result = run_gpu_jobs(tmp_path, fake_gpus=0 if real else 2)
    jobs = result["jobs"]
    assert set(jobs) == {"gpu-0", "gpu-1"}
    for j in jobs.values():
        assert j["state"] == "SUCCEEDED", j["log_tail"]
        assert j["seen"] is not None, j["log_tail"]
        visible = j["seen"]["cuda_visible_devices"]
        assert visible is not None and len(visible.split(",")) == 1, visible
        assert real or j["seen"]["overlapped"], "the two jobs never ran at once"
        if real:
            assert j["seen"]["torch_devices"] == 1, j["seen"]
    if not real:  # two jobs at once on two GPUs: one each, never the same
        assert result["ray_gpus"] == 2.0
        seen = sorted(j["seen"]["cuda_visible_devices"] for j in jobs.values())
        assert seen == ["0", "1"]
