"""CLI plumbing without a server: YAML submissions, the live table, `down`, error exits."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controlplane.cli.control import load_submission
from controlplane.cli.live import LiveTable, progress_bar
from controlplane.cli.main import main
from controlplane.client import read_endpoint, write_endpoint
from controlplane.core.errors import InvalidInput, NotFound


def test_yaml_one_job(tmp_path: Path) -> None:
    f = tmp_path / "job.yaml"
    f.write_text("name: train\nkind: deadline\ncompute_hours: 10\ndeadline_hours: 14\n")
    jobs, bag = load_submission(f)
    assert jobs == [{"name": "train", "kind": "deadline", "compute_hours": 10, "deadline_hours": 14}]
    assert bag is None


def test_yaml_jobs_and_bag(tmp_path: Path) -> None:
    f = tmp_path / "many.yaml"
    f.write_text(
        "jobs:\n  - {name: a, compute_hours: 1}\n  - {name: b, kind: hp, compute_hours: 2}\n"
        "bag:\n  name: sweep\n  template: {name: s, compute_hours: 3}\n  params: [{lr: 0.1}, {lr: 0.01}]\n"
    )
    jobs, bag = load_submission(f)
    assert [j["name"] for j in jobs] == ["a", "b"]
    assert bag is not None and bag["params"] == [{"lr": 0.1}, {"lr": 0.01}]


def test_yaml_errors_name_the_field(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("jobs: 3\n")
    with pytest.raises(InvalidInput, match=r"^jobs: must be a list of job mappings"):
        load_submission(f)
    f.write_text("name: [unclosed\n")
    with pytest.raises(InvalidInput, match=r"^file: .* is not valid YAML"):
        load_submission(f)
    with pytest.raises(NotFound, match="no such file"):
        load_submission(tmp_path / "missing.yaml")


@pytest.mark.parametrize(("text", "field", "message"), [
    ("name: a\ncompute_hours: 1\nname: b\n", "file", "is not valid YAML (line 3, column 1: key 'name' appears twice)"),
    ("name: [unclosed\n", "file", "is not valid YAML (line 2, column 1: expected ',' or ']', but got '<stream end>')"),
    ("", "file", "must hold a mapping"),
    ("name: a\n", "job.compute_hours", "Field required"),
    ("name: a\ncompute_hours: nan\n", "job.compute_hours", "Input should be a valid number"),
    ("name: a\ncompute_hours: -1\n", "job.compute_hours", "Input should be greater than 0"),
    ("name: a\ncompute_hours: 1\ngpus: 2\n", "job.gpus", "Extra inputs are not permitted"),
    ("jobs:\n  - {name: a, compute_hours: 1}\n  - {name: b, compute_hours: ten}\n", "jobs[1].compute_hours",
     "Input should be a valid number"),
    ("jobs: []\nbag: {name: s, template: {name: s, compute_hours: 1}, params: []}\n", "bag.params",
     "List should have at least 1 item after validation, not 0"),
    ("jobs: []\ndefaults: {kind: hp}\n", "defaults", "unknown top-level key"),
    ("name: a\nkind: deadline\ncompute_hours: 10\n", "job",
     "deadline_hours: a deadline job needs deadline_hours (or deadline)"),
])
def test_a_bad_job_file_is_one_line_naming_the_entry_and_field(tmp_path: Path, text: str, field: str,
                                                               message: str) -> None:
    f = tmp_path / "jobs.yaml"
    f.write_text(text)
    with pytest.raises(InvalidInput) as err:
        load_submission(f)
    assert err.value.field == field and message in str(err.value) and "\n" not in str(err.value)


def test_a_bad_second_job_submits_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "jobs.yaml"
    f.write_text("jobs:\n  - {name: a, compute_hours: 1}\n  - {name: b, kind: deadline, compute_hours: 9, "
                 "deadline_hours: 5}\n")
    # no server listens on port 9: exit 2 before any request is tried proves nothing was sent
    assert main(["submit", str(f), "--url", "http://127.0.0.1:9", "--token", "t"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("spotplane: error: jobs[1]: deadline_hours: 5.0 h is less than compute_hours + "
                          "overhead_hours = 9.05 h") and err.count("\n") == 1


def test_a_job_file_that_is_not_text_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "jobs.yaml"
    f.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(InvalidInput, match=r"^file: .* is not UTF-8 text — save the job file as UTF-8 YAML$"):
        load_submission(f)


def test_submit_of_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["submit", str(tmp_path / "nope.yaml"), "--url", "http://127.0.0.1:9", "--token", "t"])
    assert rc == 2
    assert "no such file" in capsys.readouterr().err


def test_client_against_nothing_says_how_to_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["jobs", "--state-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1
    assert "spotplane up" in err


def test_progress_bar() -> None:
    assert progress_bar(0.5, 10, ascii_only=True) == "[#####.....]"
    assert progress_bar(2.0, 4, ascii_only=True) == "[####]"
    assert progress_bar(-1, 4) == "\u2591" * 4


def _job(jid: str, state: str, frac: float) -> dict:
    return {"id": jid, "name": jid, "tenant_id": "t1", "kind": "spot", "state": state,
            "progress_fraction": frac, "cost": 1.0, "preemptions": 0, "checkpoints": 0,
            "deadline_at": None, "finished_at": None, "market": "spot"}


def test_live_table_plain_lines_only_on_change() -> None:
    out = io.StringIO()
    table = LiveTable(out, tty=False, summary_every=1e9)
    table.update([_job("a", "QUEUED", 0.0)], 3600.0, tenants={"t1": "acme"}, wall=0.0)
    table.update([_job("a", "QUEUED", 0.0)], 7200.0, tenants={"t1": "acme"}, wall=1.0)
    table.update([_job("a", "RUNNING", 0.5)], 7200.0, tenants={"t1": "acme"}, wall=2.0)
    lines = out.getvalue().splitlines()
    assert "\x1b" not in out.getvalue()
    assert sum("-> QUEUED" in line for line in lines) == 1
    assert any("a (acme, spot) -> RUNNING 50%" in line for line in lines)


def test_live_table_redraws_in_place_on_tty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")  # the table fits the terminal: a wide one, whatever runs the test
    out = io.StringIO()
    table = LiveTable(out, tty=True)
    table.update([_job("a", "RUNNING", 0.25), _job("b", "QUEUED", 0.0)], 0.0)
    first = out.getvalue()
    table.update([_job("a", "RUNNING", 0.75), _job("b", "RUNNING", 0.1)], 60.0)
    second = out.getvalue()[len(first):]
    assert second.startswith("\x1b[4F\x1b[J")  # up over the 4 lines drawn, clear below
    assert "75%" in second


def _detached_sleeper() -> int:
    """A process that is not our child (like a real `spotplane up`), so it never lingers as a zombie."""
    out = subprocess.run(["sh", "-c", f"{sys.executable} -c 'import time; time.sleep(120)' >/dev/null 2>&1 & echo $!"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_down_stops_the_recorded_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pid = _detached_sleeper()
    try:
        write_endpoint(tmp_path, "http://127.0.0.1:1", pid)
        assert oct((tmp_path / "endpoint.json").stat().st_mode & 0o777) == "0o600"
        t0 = time.monotonic()
        assert main(["down", "--state-dir", str(tmp_path), "--timeout", "20"]) == 0
        assert time.monotonic() - t0 < 20
        assert not _alive(pid)
        assert f"stopped `spotplane up` (pid {pid})" in capsys.readouterr().out
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    assert read_endpoint(tmp_path) is not None  # `up` itself clears it on the way out


def test_down_with_a_stale_endpoint_forgets_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pid = _detached_sleeper()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    write_endpoint(tmp_path, "http://127.0.0.1:1", pid)
    assert main(["down", "--state-dir", str(tmp_path)]) == 0
    assert "was not running" in capsys.readouterr().out
    assert read_endpoint(tmp_path) is None


def test_up_artifacts_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from controlplane.cli.up import child_command, executor_options

    monkeypatch.delenv("SPOTPLANE_ARTIFACTS", raising=False)
    monkeypatch.delenv("SPOTPLANE_S3_ENDPOINT", raising=False)
    args = argparse.Namespace(artifacts=None, s3_endpoint=None)
    assert executor_options(args, tmp_path) == {"artifact_uri": str(tmp_path / "artifacts"),
                                                "package_dir": str(tmp_path / "packages"),
                                                "log_dir": str(tmp_path / "logs")}
    args.artifacts = "s3://ckpt/team-a"
    args.s3_endpoint = "http://127.0.0.1:9000"
    assert executor_options(args, tmp_path) == {"artifact_uri": "s3://ckpt/team-a",
                                                "package_dir": str(tmp_path / "packages"),
                                                "log_dir": str(tmp_path / "logs"),
                                                "s3_endpoint_url": "http://127.0.0.1:9000"}
    monkeypatch.setenv("SPOTPLANE_ARTIFACTS", str(tmp_path / "shared"))
    assert executor_options(argparse.Namespace(), tmp_path)["artifact_uri"] == str(tmp_path / "shared")
    with pytest.raises(InvalidInput, match="--s3-endpoint.*s3://"):
        executor_options(argparse.Namespace(s3_endpoint="http://x"), tmp_path)
    with pytest.raises(InvalidInput, match="unsupported URI 'hdfs://b'.*gs://bucket/prefix"):
        executor_options(argparse.Namespace(artifacts="hdfs://b"), tmp_path)
    assert executor_options(argparse.Namespace(artifacts="gs://b/p"), tmp_path)["artifact_uri"] == "gs://b/p"
    # the supervisor hands the options on to the `up` it runs
    up = argparse.Namespace(debug=False, host="127.0.0.1", fleet="sim", demo=False, speed=None,
                            report_json=None, plot=None, artifacts="s3://ckpt/a",
                            s3_endpoint="http://127.0.0.1:9000")
    cmd = child_command(up, tmp_path, 8000)
    assert cmd[cmd.index("--artifacts") + 1] == "s3://ckpt/a"
    assert cmd[cmd.index("--s3-endpoint") + 1] == "http://127.0.0.1:9000"
    up.zone_observation = "evidence"
    cmd = child_command(up, tmp_path, 8000)
    assert cmd[cmd.index("--zone-observation") + 1] == "evidence"


def test_up_zone_observation_is_one_of_the_two_modes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["up", "--zone-observation", "psychic"])
    assert e.value.code == 2
    assert "--zone-observation: invalid choice: 'psychic' (choose from 'free', 'evidence')" in (
        capsys.readouterr().err)


def test_up_with_a_bad_artifacts_uri_exits_2_before_starting(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["up", "--state-dir", str(tmp_path), "--artifacts", "hdfs://bucket/x"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--artifacts" in err and "s3://bucket/prefix" in err


def test_up_workload_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from controlplane.cli.up import child_command, workload_options

    for name in ("SPOTPLANE_WORKLOAD_ADDRESS", "SPOTPLANE_WORKLOAD_GCS", "SPOTPLANE_WORKLOAD_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    assert workload_options(argparse.Namespace()) == {}  # `up` starts a local workload Ray
    args = argparse.Namespace(workload_address="http://head:8265", workload_gcs="head:6379",
                              workload_token=str(tmp_path / "tok"))
    assert workload_options(args) == {"workload_address": "http://head:8265", "workload_gcs": "head:6379",
                                      "workload_token_path": str(tmp_path / "tok")}
    monkeypatch.setenv("SPOTPLANE_WORKLOAD_ADDRESS", "http://w:8265")
    assert workload_options(argparse.Namespace()) == {"workload_address": "http://w:8265"}
    monkeypatch.delenv("SPOTPLANE_WORKLOAD_ADDRESS")
    with pytest.raises(InvalidInput, match="--workload-address: is missing"):
        workload_options(argparse.Namespace(workload_gcs="head:6379"))
    up = argparse.Namespace(debug=False, host="127.0.0.1", fleet="ray", demo=False, speed=None,
                            report_json=None, plot=None, **vars(args))
    cmd = child_command(up, tmp_path, 8000)
    assert cmd[cmd.index("--workload-address") + 1] == "http://head:8265"
    assert cmd[cmd.index("--workload-gcs") + 1] == "head:6379"


def test_up_fleet_ray_without_a_workload_cluster_exits_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPOTPLANE_WORKLOAD_ADDRESS", raising=False)
    assert main(["up", "--state-dir", str(tmp_path), "--fleet", "ray"]) == 2
    assert "--workload-address" in capsys.readouterr().err


def test_stop_bounds_a_hung_step_and_still_runs_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`up`'s stop: a step that hangs is cut at STOP_STEP_S and named; one that raises does not
    keep the next from running; the workload Ray is still stopped."""
    import threading

    from controlplane.cli import up

    release = threading.Event()
    stopped: list[str] = []

    class Workload:
        def stop(self, timeout_s: float) -> None:
            stopped.append(f"workload {timeout_s:g}")

    def hung_api() -> None:
        release.wait(30)

    def failing_control_plane(handles: object) -> None:
        stopped.append("control plane")
        raise RuntimeError("actor already dead")

    import actors.runtime
    import serve.app

    monkeypatch.setattr(up, "STOP_STEP_S", 0.2)
    monkeypatch.setattr(up.signal, "signal", lambda *_: None)  # _stop ignores Ctrl-C: not pytest's
    monkeypatch.setattr(serve.app, "stop_api", hung_api)
    monkeypatch.setattr(actors.runtime, "stop_control_plane", failing_control_plane)
    started = {"api": True, "control_plane": object(), "workload": Workload()}
    try:
        left = up._stop(started, tmp_path)
    finally:
        release.set()
    assert left == ["the API"]
    assert stopped == ["control plane", "workload 1"]
    err = capsys.readouterr().err
    assert "stopping the API: not done after 0 s, going on" in err
    assert "stopped the control plane in" in err and "stopped the workload Ray in" in err
    assert started == {}

def test_up_workload_user_is_checked_before_ray_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from controlplane.cli.up import child_command, workload_user

    for name in ("SPOTPLANE_WORKLOAD_USER", "SPOTPLANE_WORKLOAD_ADDRESS", "SPOTPLANE_ARTIFACTS"):
        monkeypatch.delenv(name, raising=False)
    state = tmp_path / "state"
    unsandboxed = {"sandboxed": False}
    assert workload_user(argparse.Namespace(), state, **unsandboxed) is None  # same-user mode
    with pytest.raises(InvalidInput, match="no OS user named 'no-such-user-x'"):
        workload_user(argparse.Namespace(workload_user="no-such-user-x"), state, sandboxed=True)
    with pytest.raises(InvalidInput, match="--workload-user: applies to the local workload Ray only"):
        workload_user(argparse.Namespace(workload_user="nobody", workload_address="http://w:8265"), state,
                      sandboxed=True)
    if os.geteuid() == 0:  # in the sandbox, root runs jobs as spotplane-jobs, made if missing,
        # and STATE/artifacts (bound into the sandbox alone) becomes that account's
        user = workload_user(argparse.Namespace(), state, sandboxed=True)
        assert user is not None and user.name == "spotplane-jobs" and user.uid != 0
        assert (state / "artifacts").stat().st_uid == user.uid
    else:
        assert workload_user(argparse.Namespace(), state, sandboxed=True) is None
    monkeypatch.setenv("SPOTPLANE_WORKLOAD_USER", "nobody")
    if os.geteuid() == 0:  # without the sandbox, the default artifacts (STATE/artifacts) are out of nobody's reach
        with pytest.raises(InvalidInput, match="--artifacts: .* is inside the state directory"):
            workload_user(argparse.Namespace(), state, **unsandboxed)
    else:
        with pytest.raises(InvalidInput, match="needs root"):
            workload_user(argparse.Namespace(), state, **unsandboxed)
    up = argparse.Namespace(debug=False, host="127.0.0.1", fleet="sim", demo=False, speed=None,
                            report_json=None, plot=None, workload_user="nobody")
    cmd = child_command(up, tmp_path, 8000)
    assert cmd[cmd.index("--workload-user") + 1] == "nobody"


def test_up_store_target_from_the_flag_the_environment_or_the_state_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from actors.runtime import RuntimeSettings
    from controlplane.cli.up import store_target

    monkeypatch.delenv("SPOTPLANE_DB", raising=False)
    assert store_target(argparse.Namespace(db=None), tmp_path) == tmp_path / "spotplane.db"
    monkeypatch.setenv("SPOTPLANE_DB", "postgresql://sp:pw@db.internal/spotplane")
    assert store_target(argparse.Namespace(db=None), tmp_path) == "postgresql://sp:pw@db.internal/spotplane"
    assert store_target(argparse.Namespace(db="sqlite:///x.db"), tmp_path) == "sqlite:///x.db"
    with pytest.raises(InvalidInput, match="db: 'mysql://u:\\*\\*\\*@h/d' is neither"):
        store_target(argparse.Namespace(db="mysql://u:secret@h/d"), tmp_path)
    settings = RuntimeSettings(state_dir=tmp_path, db="postgresql://h/d")
    assert settings.db_path == "postgresql://h/d" and settings.actor_config().db == "postgresql://h/d"
    assert RuntimeSettings(state_dir=tmp_path).actor_config().db == str(tmp_path / "spotplane.db")


@pytest.mark.parametrize(("argv", "says"), [
    (["--db", "mysql://u:secret@h/d"], "postgresql://USER@HOST/DB"),
    (["--db", "postgresql://u:secret@h/d", "--fresh"], "cannot empty the PostgreSQL database"),
])
def test_up_refuses_a_bad_store_before_starting(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                argv: list[str], says: str) -> None:
    code = main(["up", "--state-dir", str(tmp_path), *argv])
    err = capsys.readouterr().err
    assert code == 2 and says in err and "secret" not in err


def test_up_standby_and_api_replicas_reach_the_child_and_bad_counts_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from controlplane.cli.up import child_command

    up = argparse.Namespace(debug=False, host="127.0.0.1", fleet="sim", demo=False, speed=None,
                            report_json=None, plot=None, standby=True, lease_ttl=4.0, api_replicas=3)
    cmd = child_command(up, tmp_path, 8000)
    assert "--standby" in cmd
    assert cmd[cmd.index("--api-replicas") + 1] == "3" and cmd[cmd.index("--lease-ttl") + 1] == "4.0"
    assert main(["up", "--state-dir", str(tmp_path / "a"), "--api-replicas", "0"]) == 2
    assert "--api-replicas: must be >= 1, got 0" in capsys.readouterr().err
    assert main(["up", "--state-dir", str(tmp_path / "b"), "--lease-ttl", "0"]) == 2
    assert "--lease-ttl: must be > 0" in capsys.readouterr().err
