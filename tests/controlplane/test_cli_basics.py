"""The CLI's shape: help, data list, and how errors reach the user (one line, exit 2 or 1)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from controlplane.cli.main import main
from controlplane.core.errors import InvalidInput, SpotplaneError


def test_help_lists_the_command_groups(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "data" in out and "--data-dir" in out


def test_data_list_counts_ticks_and_availability(capsys: pytest.CaptureFixture[str], data_root: Path) -> None:
    assert main(["--data-dir", str(data_root), "data", "list", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert all(d["present"] for d in listing["datasets"])
    traces = {t["path"]: t for t in listing["traces"]}
    t = traces["spot-traces/availability/1-node/aws-02-15-2023/us-west-2a_v100_1.json"]
    assert t["ticks"] == 20158 and t["gap_seconds"] == 195 and 0.85 < t["availability"] < 0.92
    assert sum(1 for p in traces if p.startswith("multiregion-h100/")) == 13


def test_data_list_on_an_empty_dir_says_how_to_fetch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--data-dir", str(tmp_path), "data", "list"]) == 0
    out = capsys.readouterr().out
    assert "MISSING" in out and "spotplane data fetch" in out


def test_errors_print_one_line_and_exit_by_kind(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from controlplane.cli.main import data

    def bad_input(_args: object) -> int:
        raise InvalidInput("deadline_hours", "must be >= compute_hours", fix="set a later deadline")

    def failure(_args: object) -> int:
        raise SpotplaneError("the cloud said no")

    monkeypatch.setattr(data, "cmd_list", bad_input)
    assert main(["data", "list"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "spotplane: error: deadline_hours: must be >= compute_hours — set a later deadline"
    monkeypatch.setattr(data, "cmd_list", failure)
    assert main(["data", "list"]) == 1
    assert "Traceback" not in capsys.readouterr().err
    assert main(["--debug", "data", "list"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_console_script_is_installed() -> None:
    exe = Path(sys.executable).parent / "spotplane"
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("spotplane ")


def _copy_with(data_root: Path, tmp_path: Path, rel: str, keep: int) -> tuple[Path, Path]:
    """A copy of the data directory whose file ``rel`` keeps only its first ``keep`` bytes."""
    root = tmp_path / "data"
    shutil.copytree(data_root, root)
    f = root / rel
    f.chmod(0o644)
    f.write_bytes(f.read_bytes()[:keep])
    return root, f


def test_data_list_marks_a_file_cut_mid_row_damaged(data_root: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    root, f = _copy_with(data_root, tmp_path, "gce-preemptions/lifetimes.csv", 5000)
    assert main(["--data-dir", str(root), "data", "list"]) == 2
    out = capsys.readouterr().out
    [row] = [line for line in out.splitlines() if line.startswith("gce-preemptions")]
    assert row.split()[1] == "DAMAGED" and f"{f}, line " in row and "cells, the header has 10" in row
    assert "alibaba-openb      ok       1213 nodes, 8152 pods" in out
    assert "damaged: gce-preemptions — re-run `spotplane data fetch` to replace them" in out


def test_data_list_marks_a_file_cut_at_a_row_end_damaged_by_its_checksum(
        data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    text = (data_root / "alibaba-openb/openb_pod_list_default.csv").read_bytes()
    root, f = _copy_with(data_root, tmp_path, "alibaba-openb/openb_pod_list_default.csv", text.index(b"\n", 4000) + 1)
    monkeypatch.setenv("SPOTPLANE_DATA_DIR", str(root))
    assert main(["data", "list", "--json"]) == 2
    listing = json.loads(capsys.readouterr().out)
    assert listing["source"] == "SPOTPLANE_DATA_DIR"
    damaged = {d["name"]: d["damaged"] for d in listing["datasets"] if d["damaged"]}
    assert damaged == {"alibaba-openb": f"{f}: sha256 differs from the one `spotplane data fetch` pinned "
                                        "(truncated or edited?) — re-run `spotplane data fetch`"}


def test_data_list_marks_a_truncated_trace_and_lists_the_others(data_root: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    rel = "spot-traces/availability/1-node/aws-02-15-2023/us-west-2a_v100_1.json"
    root, f = _copy_with(data_root, tmp_path, rel, 300)
    assert main(["--data-dir", str(root), "data", "list", "--json"]) == 2
    listing = json.loads(capsys.readouterr().out)
    spot = next(d for d in listing["datasets"] if d["name"] == "spot-traces")
    assert spot["summary"] == "33 traces, 1 damaged"
    assert spot["damaged"].startswith(f"{f}, line 1: not valid JSON (")
    assert rel not in {t["path"] for t in listing["traces"]} and len(listing["traces"]) == 33 + 13


def test_a_bad_setting_in_the_environment_is_one_line_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SPOTPLANE_PORT", "eighty")
    assert main(["data", "list"]) == 2
    err = capsys.readouterr().err
    assert err == ("spotplane: error: SPOTPLANE_PORT: 'eighty' is not valid (Input should be a valid integer, "
                   "unable to parse string as an integer) — set SPOTPLANE_PORT to a whole number in 1..65535, "
                   "or unset it\n")


def test_errors_survive_a_process_boundary() -> None:
    import pickle

    from controlplane.core.errors import BadDataFile, CapacityUnavailable

    for err in (BadDataFile("p.csv", "bad", line=3, column="x", fix="fix it").given_as("--pods"),
                InvalidInput("a", "b", fix="c"), CapacityUnavailable("z", "t", "r")):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err) and back.__dict__ == err.__dict__
    assert str(back) == "no capacity for t in z (r) — another zone, on-demand, or waiting will do"
    assert str(pickle.loads(pickle.dumps(BadDataFile("p.csv", "bad", line=3, fix="f").given_as("--pods")))) == \
        "--pods p.csv, line 3: bad — f"
