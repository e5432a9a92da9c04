"""The CLI's shape: help, data list, and how errors reach the user (one line, exit 2 or 1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from controlplane.cli import main
from controlplane.errors import InvalidInput, SpotplaneError


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
    from controlplane.commands import data

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
