"""A real job is given exactly its GPUs by Ray, on nodes with more GPUs than it asks for.

The jobs run through RayJobExecutor on a workload Ray of two nodes with two GPUs each, in a
child process (``gpu_jobs.py``): a one-GPU job and a two-worker gang (one GPU per worker) share
node 0, so a job that saw every GPU of its node, or one that was not pinned where it was told,
fails the test. The GPUs are declared to Ray, which hands them out exactly as real ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from actors.execution import ExecutorConfig
from controlplane.core.config import REPO_ROOT
from controlplane.core.errors import InvalidInput


def run_gpu_jobs(tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / "gpu.json"
    cmd = [sys.executable, str(Path(__file__).with_name("gpu_jobs.py")), "--out", str(out)]
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=420)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def test_unknown_gpu_mode_names_the_choices() -> None:
    with pytest.raises(InvalidInput, match="gpus.*auto, always, never"):
        ExecutorConfig(workload_address="127.0.0.1:1", artifact_uri="/tmp/x", gpus="some")


def one_gpu(visible: str | None) -> str:
    """The one device id in ``CUDA_VISIBLE_DEVICES`` (unset or several: every GPU, or not one)."""
    assert visible is not None, "CUDA_VISIBLE_DEVICES is not set: the job sees every GPU"
    ids = [v for v in visible.split(",") if v]
    assert len(ids) == 1, f"CUDA_VISIBLE_DEVICES={visible!r}: not exactly one GPU"
    return ids[0]


@pytest.mark.slow
@pytest.mark.ray
def test_each_job_sees_exactly_its_gpus_on_two_gpu_nodes(tmp_path: Path) -> None:
    result = run_gpu_jobs(tmp_path)
    assert result["gpus"] == 4.0  # two worker nodes of two GPUs
    assert result["slots"] == {"n0": "spotplane_slot:0", "n1": "spotplane_slot:1"}
    jobs = result["jobs"]
    for j in jobs.values():
        assert j["state"] == "SUCCEEDED", j["log_tail"]
        assert j["seen"] is not None and j["seen"]["overlapped"], j["log_tail"]
    single, gang = jobs["single"]["seen"], jobs["gang"]["seen"]
    single_gpu = one_gpu(single["cuda_visible_devices"])
    # the gang's driver holds no GPU (its workers' are the placement group's bundles)
    assert gang["cuda_visible_devices"] in (None, ""), gang
    workers = sorted(gang["workers"], key=lambda w: w["bundle"])
    assert [w["bundle"] for w in workers] == [0, 1]
    for w in workers:
        assert [one_gpu(w["cuda_visible_devices"])] == w["gpu_ids"], w
    # STRICT_SPREAD: one worker per node; bundle 0 on n1's raylet with the gang's driver,
    # bundle 1 on n0's, which the single job's driver runs on too
    assert jobs["single"]["pin"] == "spotplane_slot:0" and jobs["gang"]["pin"] == "spotplane_slot:1"
    assert workers[0]["node"] != workers[1]["node"], workers
    assert workers[0]["node"] == jobs["gang"]["driver_node"], (workers, jobs["gang"])
    assert workers[1]["node"] == jobs["single"]["driver_node"], (workers, jobs["single"])
    # node 0's two GPUs: one for the single job, the other for the gang's worker there
    assert {single_gpu, workers[1]["gpu_ids"][0]} == {"0", "1"}, (single, workers)
