"""The job SDK outside spotplane (local folder) and with a coordinator telling it when to save."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clusters.artifacts import ArtifactRef, LocalArtifactStore
from controlplane import sdk
from controlplane.core.clock import SimClock
from controlplane.core.errors import DataCorrupt, InvalidInput
from tests.support import TRAIN_SCRIPT, load_train


@pytest.fixture(autouse=True)
def _no_spotplane_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("SPOTPLANE_"):
            monkeypatch.delenv(name)


def test_serialisation_roundtrips_bytes_arrays_and_objects() -> None:
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert sdk.loads(sdk.dumps(b"\x00raw")) == b"\x00raw"
    back = sdk.loads(sdk.dumps(arr))
    assert back.dtype == np.float32 and np.array_equal(back, arr)
    assert sdk.dumps(arr)[5:6] == sdk.KIND_NUMPY  # no pickle for plain arrays
    obj = {"step": 3, "w": arr, "opt": [1.5, None]}
    got = sdk.loads(sdk.dumps(obj))
    assert got["step"] == 3 and np.array_equal(got["w"], arr) and got["opt"] == [1.5, None]
    with pytest.raises(DataCorrupt, match="header"):
        sdk.loads(b"not a checkpoint")
    with pytest.raises(InvalidInput, match="state"):
        sdk.dumps(lambda: 0)


def test_torch_state_dicts_use_torch_save_only_when_torch_is_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    fake = types.ModuleType("torch")

    def save(obj: Any, f: Any) -> None:
        calls.append("save")
        f.write(repr({k: v.v for k, v in obj.items()}).encode())

    def load(f: Any, weights_only: bool = True) -> Any:
        calls.append("load")
        return {k: Tensor(v) for k, v in eval(f.read().decode()).items()}  # noqa: S307

    fake.save = save  # type: ignore[attr-defined]
    fake.load = load  # type: ignore[attr-defined]
    state = {"layer.weight": Tensor(0.5)}
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert sdk.dumps(state)[5:6] == sdk.KIND_PICKLE  # torch not imported: plain pickle
    monkeypatch.setattr(Tensor, "__module__", "torch")
    monkeypatch.setitem(sys.modules, "torch", fake)
    data = sdk.dumps(state)
    assert data[5:6] == sdk.KIND_TORCH
    assert sdk.loads(data)["layer.weight"].v == 0.5
    assert calls == ["save", "load"]


def test_local_session_checkpoints_on_interval_and_restores(tmp_path: Path) -> None:
    clock = SimClock(start=0.0)
    with sdk.session(artifact_uri=tmp_path, interval_s=60, clock=clock) as s:
        assert not s.inside_spotplane and s.job_id == "local" and s.replica_id == "r0"
        assert s.restore() is None
        s.progress(0.1)
        assert not s.should_checkpoint()
        clock.advance(61)
        assert s.should_checkpoint()
        ref = s.save({"step": 10})
        assert ref.progress == 0.1 and not s.should_checkpoint()
    with sdk.session(artifact_uri=tmp_path, interval_s=60, clock=clock) as s2:
        assert s2.restore() == {"step": 10}
        assert s2.fraction_done == 0.1 and s2.restored_ref == ref


def test_environment_names_the_job_replica_and_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(sdk.ENV_JOB_ID, "job-7")
    monkeypatch.setenv(sdk.ENV_REPLICA_ID, "r1")
    monkeypatch.setenv(sdk.ENV_ARTIFACT_URI, str(tmp_path / "store"))
    with sdk.session(interval_s=1) as s:
        assert s.inside_spotplane and (s.job_id, s.replica_id) == ("job-7", "r1")
        s.progress(0.5)
        s.save(b"x")
    (ref,) = LocalArtifactStore(tmp_path / "store").list("job-7")
    assert ref.replica_id == "r1" and ref.progress == 0.5


class ScriptedCoordinator:
    """Plays the checkpoint actor's part: a schedule by progress and a notice on demand."""

    def __init__(self, next_at: float) -> None:
        self.next_at = next_at
        self.notice = False
        self.saved_refs: list[tuple[ArtifactRef, float]] = []
        self.restores: list[ArtifactRef | None] = []
        self.done = False

    def directive(self, progress: float) -> sdk.Directive | None:
        return sdk.Directive(checkpoint_now=self.notice, next_at_progress=self.next_at)

    def saved(self, ref: ArtifactRef, seconds: float) -> None:
        self.saved_refs.append((ref, seconds))
        self.notice = False
        self.next_at += 0.25

    def restored(self, ref: ArtifactRef | None) -> None:
        self.restores.append(ref)

    def finished(self) -> None:
        self.done = True


def test_session_follows_the_schedule_and_saves_at_once_on_a_notice(tmp_path: Path) -> None:
    coord = ScriptedCoordinator(next_at=0.25)
    with sdk.session(artifact_uri=tmp_path, coordinator=coord) as s:
        s.restore()
        saved_at = []
        for i in range(1, 11):
            s.progress(i / 10)
            if i == 6:
                coord.notice = True
            if s.should_checkpoint():
                s.save({"i": i})
                saved_at.append(i)
    assert saved_at == [3, 5, 6, 10]  # 0.25 -> 3, 0.5 -> 5, the notice at 6, then 1.0 -> 10
    assert coord.restores == [None] and coord.done
    assert all(sec >= 0 for _, sec in coord.saved_refs)


def test_corrupt_newest_checkpoint_resumes_from_the_one_before(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    with sdk.session(artifact_uri=tmp_path, interval_s=1e9) as s:
        s.progress(0.2)
        s.save({"step": 2})
        s.progress(0.4)
        newest = s.save({"step": 4})
    blob = store.path_of(newest.blob_key)
    blob.write_bytes(blob.read_bytes()[:-3] + b"bad")
    with sdk.session(artifact_uri=tmp_path, interval_s=1e9) as s2:
        assert s2.restore() == {"step": 2}
        assert s2.fraction_done == 0.2
    assert [e.kind for e in store.events("local")] == ["corrupt", "fallback"]


class Tensor:
    """Stands in for torch.Tensor: the SDK recognises torch values by their module, not by import."""

    def __init__(self, v: float) -> None:
        self.v = v


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(TRAIN_SCRIPT), *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.slow
def test_killed_three_times_the_numpy_job_ends_bit_identical(tmp_path: Path) -> None:
    """Real processes, SIGKILLed (memory lost) 3 times, resume from their checkpoints."""
    steps, seed = 240, 3
    train = load_train()
    reference = train.fresh(seed)
    for _ in range(steps):
        train.step(reference, seed)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTPLANE_")}
    env.update({sdk.ENV_CHECKPOINT_DIR: str(tmp_path / "ckpt"), sdk.ENV_INTERVAL_S: "0.15"})
    store = LocalArtifactStore(tmp_path / "ckpt")
    out = tmp_path / "final.npz"
    kills = 0
    while kills < 3:
        p = _run(
            ["--steps", str(steps), "--seed", str(seed), "--step-seconds", "0.01"], env, tmp_path
        )
        have = len(store.list("local"))
        deadline = time.monotonic() + 30
        while (
            len(store.list("local")) < have + 2 and time.monotonic() < deadline and p.poll() is None
        ):
            time.sleep(0.05)
        assert p.poll() is None, f"finished before being killed: {p.communicate()[0]}"
        p.send_signal(signal.SIGKILL)
        p.wait()
        kills += 1
    p = _run(["--steps", str(steps), "--seed", str(seed), "--out", str(out)], env, tmp_path)
    log_text = p.communicate(timeout=60)[0]
    assert p.returncode == 0, log_text
    assert "starting at step 0" not in log_text  # it resumed
    final = np.load(out)
    assert int(final["step"]) == steps
    for k in ("w1", "w2", "v1", "v2"):
        assert final[k].tobytes() == reference[k].tobytes(), k
    assert f"sha256 {train.digest(reference)}" in log_text
