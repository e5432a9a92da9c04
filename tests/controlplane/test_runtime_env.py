"""A job's runtime_env, Ray's submit request mapped to a spotplane job, uploaded packages, the
log archive and the client's upload-once packaging: the parts that need no Ray cluster."""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from actors.execution.pinning import SlotMap
from clusters.blobs import DirBlobs
from clusters.packages import PackageStore, package_name
from clusters.rayjobs import LogArchive, attempt_marker, concatenated_logs
from controlplane.cli.control import load_submission, with_working_dir
from controlplane.cli.packaging import package_uri, upload_working_dir
from controlplane.core.blobs import Blobs
from controlplane.core.errors import InvalidInput, NotFound
from controlplane.core.inputs import MAX_ENV_VARS
from controlplane.core.models import Job, JobKind, JobSpec, JobState
from controlplane.core.runtime_env import RuntimeEnv
from controlplane.store import IN_STORE, Store, open_blobs
from serve.rayjobs import RaySubmitRequest, job_details, spec_from_ray

PKG = "gcs://_ray_pkg_0123456789abcdef.zip"


def spec(**renv: Any) -> JobSpec:
    return JobSpec(name="j", compute_hours=1.0, entrypoint="python train.py", runtime_env=renv)


def error_of(**renv: Any) -> str:
    with pytest.raises(ValidationError) as e:
        spec(**renv)
    first = e.value.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"


# -- runtime_env on JobSpec ---------------------------------------------------------------------
def test_runtime_env_takes_packages_pip_env_vars_and_config() -> None:
    s = spec(working_dir=PKG, py_modules=["s3://bucket/lib.zip"], pip=["numpy==2.1"],
             env_vars={"SEED": "3"}, excludes=["data/"], config={"setup_timeout_seconds": 60})
    assert s.runtime_env is not None
    assert s.runtime_env.packages() == [PKG]
    assert s.runtime_env.for_ray() == {"working_dir": PKG, "py_modules": ["s3://bucket/lib.zip"],
                                       "pip": ["numpy==2.1"],
                                       "config": {"setup_timeout_seconds": 60}}


@pytest.mark.parametrize(("renv", "expected"), [
    ({"workdir": PKG}, r"runtime_env\.workdir: Extra inputs are not permitted"),
    ({"working_dir": "."}, r"working_dir: '\.' is a local path the server cannot see"),
    ({"working_dir": "/home/me/project"}, "is a local path the server cannot see"),
    ({"py_modules": ["./lib"]}, r"py_modules\[0\]: './lib' is a local path"),
    ({"working_dir": "gcs://other.zip"}, "is not an uploaded package URI"),
    ({"working_dir": "s3://b/dir/"}, "must be a .zip"),
    ({"pip": ["a"], "uv": ["b"]}, "uv: give either pip or uv, not both"),
    ({"config": {"eager": True}}, r"runtime_env\.config\.eager"),
    ({"env_vars": {f"K{i}": "v" for i in range(MAX_ENV_VARS + 1)}}, "at most 64"),
    ({"env_vars": {"K": "x" * 5000}}, "at most 4096"),
    ({"pip": ["x"] * 257}, "at most 256"),
])
def test_runtime_env_refusals_name_the_field(renv: dict[str, Any], expected: str) -> None:
    import re

    assert re.search(expected, error_of(**renv)), error_of(**renv)


def test_runtime_env_needs_an_entrypoint() -> None:
    with pytest.raises(ValidationError, match="runtime_env: only a job with an entrypoint"):
        JobSpec(name="j", compute_hours=1.0, runtime_env={"working_dir": PKG})


# -- Ray's submit request -> a spotplane job ----------------------------------------------------
def ray(**body: Any) -> JobSpec:
    return spec_from_ray(RaySubmitRequest(entrypoint="python train.py --lr 0.1", **body))


def test_ray_metadata_and_resources_become_the_job() -> None:
    s = ray(metadata={"spotplane.deadline_hours": "12", "spotplane.compute_hours": "3.5",
                      "spotplane.accelerator": "H100", "spotplane.workers": "2", "team": "nlp"},
            entrypoint_num_gpus=4, runtime_env={"working_dir": PKG}, submission_id="mine-1")
    assert (s.kind, s.deadline_hours, s.compute_hours, s.accelerator, s.workers,
            s.gpus_per_worker) == (JobKind.DEADLINE, 12.0, 3.5, "H100", 2, 4)
    assert s.metadata == {"team": "nlp", "ray.submission_id": "mine-1"}
    assert s.runtime_env is not None and s.runtime_env.working_dir == PKG
    assert s.name == "python train.py --lr 0.1"
    r = ray(entrypoint_resources={"GPU": 2, "accelerator_type:A100": 1})
    assert (r.gpus_per_worker, r.accelerator, r.kind) == (2, "A100", JobKind.SPOT)


@pytest.mark.parametrize(("body", "field"), [
    ({"metadata": {"spotplane.workers": "two"}}, "metadata.spotplane.workers"),
    ({"metadata": {"spotplane.colour": "red"}}, "metadata.spotplane.colour"),
    ({"metadata": {"spotplane.kind": "cheap"}}, "metadata.spotplane.kind"),
    ({"metadata": {"spotplane.workers": "0"}}, "metadata.spotplane.workers"),
    ({"entrypoint_num_gpus": 0.5}, "entrypoint_num_gpus"),
    ({"entrypoint_resources": {"TPU": 1}}, "entrypoint_resources.TPU"),
    ({"runtime_env": {"working_dir": "."}}, "runtime_env"),
])
def test_bad_ray_submissions_name_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as e:
        ray(**body)
    assert e.value.field == field, (e.value.field, e.value.message)


def test_ray_status_follows_the_job_across_preemptions() -> None:
    base = ray(metadata={"k": "v"})
    job = Job(id="job-1", tenant_id="t", name="n", kind=JobKind.SPOT, spec=base, submitted_at=10.0)
    expected = {JobState.PENDING: "PENDING", JobState.QUEUED: "PENDING",
                JobState.STARTING: "PENDING", JobState.RUNNING: "RUNNING",
                JobState.CHECKPOINTING: "RUNNING", JobState.PREEMPTED: "PENDING",
                JobState.SUCCEEDED: "SUCCEEDED", JobState.FAILED: "FAILED",
                JobState.CANCELLED: "STOPPED"}
    for state, status in expected.items():
        d = job_details(job.model_copy(update={"state": state}))
        assert d["status"] == status and d["submission_id"] == "job-1"
    d = job_details(job.model_copy(update={"preemptions": 2, "finished_at": 20.5}))
    assert d["metadata"]["spotplane.preemptions"] == "2" and d["end_time"] == 20500
    from ray.dashboard.modules.job.pydantic_models import JobDetails

    JobDetails(**d)  # Ray's own client parses it


# -- packages, logs, slots ----------------------------------------------------------------------
def zipped(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
    return buf.getvalue()


@pytest.fixture(params=["directory", "sqlite-table", "postgresql-table"])
def blobs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Blobs]:
    """Each home of packages and logs: a directory, then the store's blobs table on each backend."""
    if request.param == "directory":
        yield DirBlobs(tmp_path / "blobs")
        return
    url = str(tmp_path / "state.db") if request.param == "sqlite-table" else request.getfixturevalue("pg_url")
    store = Store(url)
    try:
        yield open_blobs(IN_STORE, store, "packages")
    finally:
        store.close()


def test_package_store_is_per_tenant_and_capped(blobs: Blobs) -> None:
    store = PackageStore(blobs, max_bytes=4096)
    name = package_name(PKG)
    assert store.put("t1", name, zipped({"a.py": b"1"})) is True
    assert store.put("t1", name, zipped({"a.py": b"1"})) is False
    assert store.exists("t1", name) and not store.exists("t2", name)
    assert store.get("t1", name) == zipped({"a.py": b"1"})
    assert store.size("t1", name) == len(zipped({"a.py": b"1"}))
    with pytest.raises(NotFound):
        store.size("t2", name)
    with pytest.raises(NotFound, match="was not uploaded"):
        store.get("t2", name)
    with pytest.raises(InvalidInput, match="not a zip"):
        store.put("t1", "_ray_pkg_ffffffffffffffff.zip", b"hello")
    with pytest.raises(InvalidInput, match="more than the cap of 4096"):
        store.put("t1", "_ray_pkg_eeeeeeeeeeeeeeee.zip", b"x" * 5000)
    with pytest.raises(InvalidInput, match="package"):
        store.key("t1", "../../etc/passwd")
    with pytest.raises(InvalidInput, match="tenant_id"):
        store.key("..", name)
    with pytest.raises(InvalidInput, match="not a blob key"):
        blobs.put("../x", b"1")


class FakeJobClient:
    """What ``actors.execution.packages.Packages.ensure`` asks of a JobSubmissionClient."""

    def __init__(self) -> None:
        self.uploaded: dict[str, bytes] = {}

    def _package_exists(self, uri: str) -> bool:
        return uri in self.uploaded

    def _upload_package(self, uri: str, path: str, include_gitignore: bool, is_file: bool) -> None:
        assert is_file and not include_gitignore
        self.uploaded[uri] = Path(path).read_bytes()


def test_the_executor_uploads_the_stored_package_bytes(blobs: Blobs) -> None:
    """The executor reads a package from the same home the API stored it in (a directory, or
    the store's table that every API replica writes) and sends those bytes to the workload."""
    from actors.execution.packages import Packages

    data = zipped({"train.py": b"print(1)\n"})
    PackageStore(blobs).put("t1", package_name(PKG), data)
    client = FakeJobClient()  # no workload cluster: its client faked
    packages = Packages(client, PackageStore(blobs))
    assert packages.ensure(PKG, "t1") is True
    assert client.uploaded == {PKG: data}
    assert packages.ensure(PKG, "t1") is False  # the workload holds it already
    client.uploaded.clear()  # Ray dropped it
    with pytest.raises(NotFound, match=f"is not in {re.escape(blobs.where)}"):
        packages.ensure(PKG, "t2")  # another tenant's package is not this tenant's


class FakeRay:
    """What concatenated_logs asks of a JobSubmissionClient: list_jobs and get_job_logs."""

    class Info:
        def __init__(self, sid: str, start: int) -> None:
            self.submission_id, self.start_time = sid, start
            self.metadata = {"spotplane_job_id": "job-1", "spotplane_replica_id": "r0",
                             "spotplane_node_id": f"n{start}"}

    def list_jobs(self) -> list[Any]:
        return [self.Info("spotplane-job-1-r0-2", 2), self.Info("spotplane-job-1-r0-1", 1)]

    def get_job_logs(self, sid: str) -> str:
        if sid.endswith("-1"):
            raise RuntimeError("Request failed with status code 500: node gone")
        return "second\n"


def test_logs_of_a_lost_node_come_from_the_archive(blobs: Blobs) -> None:
    archive = LogArchive(blobs)
    assert concatenated_logs(FakeRay(), "job-1") == (
        "=== attempt 1 of job-1 (replica r0 on node n1) ===\n"
        "(logs unavailable: Request failed with status code 500: node gone)\n"
        "=== attempt 2 of job-1 (replica r0 on node n2) ===\nsecond\n")
    archive.save("job-1", "spotplane-job-1-r0-1", "first\nsaved\n")
    archive.save("job-1", "spotplane-job-1-r0-1", "fir")  # a shorter copy never replaces
    text = concatenated_logs(FakeRay(), "job-1", archive)
    assert text.startswith(attempt_marker("spotplane-job-1-r0-1", FakeRay.Info("x", 1).metadata)
                           + "\nfirst\nsaved\n===")
    archive.save("job-1", "spotplane-job-1-r0-1", "first\nsaved\nand more\n")  # a longer does
    assert archive.load("job-1", "spotplane-job-1-r0-1") == "first\nsaved\nand more\n"
    assert archive.load("job-1", "spotplane-job-1-r0-9") is None
    with pytest.raises(InvalidInput):
        archive.key("../x", "s")


def test_a_slot_whose_raylet_is_gone_is_never_bound() -> None:
    m = SlotMap(["spotplane_slot:0", "spotplane_slot:1"])
    assert m.slot_for("a", {"spotplane_slot:1", "CPU"}) == "spotplane_slot:1"
    assert m.slot_for("b", {"spotplane_slot:1"}) is None
    assert m.slot_for("b", None) == "spotplane_slot:0"
    m.learn(["spotplane_slot:1", "spotplane_slot:7", "spotplane_slot:2"])  # two raylets joined
    assert m.free == ["spotplane_slot:2", "spotplane_slot:7"]


# -- the CLI's packaging: Ray's zip, uploaded once ----------------------------------------------
class FakeApi:
    def __init__(self) -> None:
        self.held: dict[str, bytes] = {}

    def package_exists(self, name: str) -> bool:
        return name in self.held

    def upload_package(self, name: str, data: bytes) -> dict[str, Any]:
        self.held[name] = data
        return {"name": name}


def test_working_dir_is_zipped_as_ray_does_and_uploaded_once(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    (proj / "data").mkdir(parents=True)
    (proj / "train.py").write_text("import helper\n")
    (proj / "helper.py").write_text("X = 1\n")
    (proj / "notes.tmp").write_text("scratch")
    (proj / ".gitignore").write_text("data/\n")
    (proj / "data" / "big.bin").write_bytes(b"\0" * 100_000)
    api = FakeApi()
    first = upload_working_dir(api, proj, ["*.tmp"])  # type: ignore[arg-type]
    assert first.sent_bytes > 0 and first.uri == package_uri(proj, ["*.tmp"])
    names = zipfile.ZipFile(io.BytesIO(api.held[package_name(first.uri)])).namelist()
    assert sorted(names) == [".gitignore", "helper.py", "train.py"]
    again = upload_working_dir(api, proj, ["*.tmp"])  # type: ignore[arg-type]
    assert again == type(again)(first.uri, 0) and len(api.held) == 1
    (proj / "helper.py").write_text("X = 2\n")
    assert upload_working_dir(api, proj, ["*.tmp"]).uri != first.uri  # type: ignore[arg-type]
    (proj / "weights.bin").write_bytes(__import__("os").urandom(50_000))
    with pytest.raises(InvalidInput, match=r"--working-dir: .* more than the 0 MiB"):
        upload_working_dir(api, proj, max_bytes=10_000)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="not a directory"):
        upload_working_dir(api, proj / "nope")  # type: ignore[arg-type]


def test_a_yaml_jobs_local_working_dir_becomes_its_package(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    job = tmp_path / "job.yaml"
    job.write_text("name: a\ncompute_hours: 1.0\nentrypoint: python t.py\n"
                   "runtime_env: {working_dir: src, excludes: ['*.log']}\n")
    seen: list[tuple[Path, list[str]]] = []

    def package(d: Path, excludes: list[str]) -> str:
        seen.append((d, excludes))
        return PKG

    jobs, _ = load_submission(job, package)
    assert jobs[0]["runtime_env"]["working_dir"] == PKG
    assert seen == [((tmp_path / "src").resolve(), ["*.log"])]
    with pytest.raises(InvalidInput, match="local path the server cannot see"):
        load_submission(job)  # no uploader: the local path is refused, naming the field
    out = with_working_dir({"name": "a", "runtime_env": {"pip": ["x"]}}, PKG, ["*.ckpt"])
    assert out["runtime_env"] == {"pip": ["x"], "working_dir": PKG, "excludes": ["*.ckpt"]}
    assert RuntimeEnv.model_validate(out["runtime_env"]).working_dir == PKG


def test_a_single_worker_job_has_no_placement_group_and_a_gang_names_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from actors.execution.submission import job_env
    from controlplane import jobenv, sdk

    monkeypatch.delenv(sdk.ENV_PLACEMENT_GROUP, raising=False)
    assert sdk.placement_group() is None
    env = job_env({"SPOTPLANE_PLACEMENT_GROUP": "forged", "SEED": "1"}, job_id="j", replica_id="r0",
                  tenant_id="t", artifact_uri="/a", actor="ckpt", namespace="ns", node_id="n",
                  pythonpath="/repo", placement_group="spotplane-pg-j-r0-1")
    assert env["SPOTPLANE_PLACEMENT_GROUP"] == "spotplane-pg-j-r0-1" and env["SEED"] == "1"
    assert "SPOTPLANE_PLACEMENT_GROUP" in jobenv.allowed(env)


def test_a_follower_loses_nothing_when_an_attempt_is_read_back_shorter() -> None:
    """Attempt 1's node is gone and its archived copy is shorter than what was already sent:
    the follower neither cuts attempt 2's marker nor repeats a line."""
    from controlplane.core.attemptlogs import split_attempts, unsent

    m1, m2 = "=== attempt 1 of job-1 (replica r0 on node a) ===", "=== attempt 2 of job-1 (replica r0 on node b) ==="
    sent: dict[str, int] = {}
    first = unsent(split_attempts(f"{m1}\nstep 1\nstep 2\nstep 3\n"), sent)
    assert first == f"{m1}\nstep 1\nstep 2\nstep 3\n"
    later = f"{m1}\nstep 1\n{m2}\nstarting at 1\n"  # attempt 1 from its archive copy
    assert unsent(split_attempts(later), sent) == f"{m2}\nstarting at 1\n"
    assert unsent(split_attempts(later + "done\n"), sent) == "done\n"
    assert first + f"{m2}\nstarting at 1\ndone\n" == f"{m1}\nstep 1\nstep 2\nstep 3\n{m2}\nstarting at 1\ndone\n"
