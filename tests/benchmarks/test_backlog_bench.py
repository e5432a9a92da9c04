"""benchmarks.backlog runs on a tiny backlog and prints exactly one JSON object with the promised keys."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

ROW_KEYS = {"queued", "tick_ms_p50", "tick_ms_max", "tick_cpu_ms_p50", "ingest_tick_ms_max",
            "ingest_tick_cpu_ms_max", "before_tick_ms_p50", "before_tick_cpu_ms_p50", "ingest_ticks_ms",
            "queued_in_memory", "first_page_ms", "cursor_page_ms", "offset_page_ms",
            "small_job_ticks_after_room"}


@pytest.mark.parametrize("db", ["sqlite", "pgserver"])
def test_backlog_benchmark_json_shape(db: str, request: pytest.FixtureRequest) -> None:
    if db == "pgserver":
        request.getfixturevalue("pg_server")  # where it cannot start: fails under CI, else skips
    out = subprocess.run([sys.executable, "-m", "benchmarks.backlog", "--json", "--backlogs",
                          "0,1500", "--ticks", "3", "--scale", "0.05", "--db", db], cwd=REPO,
                         capture_output=True, text=True, timeout=300, check=True)
    data = json.loads(out.stdout)
    assert set(data) == {"backlogs", "restart", "targets"}
    empty, big = data["backlogs"]
    assert set(empty) == set(big) == ROW_KEYS
    assert (empty["queued"], big["queued"]) == (0, 1500)
    assert empty["queued_in_memory"] == 0 and big["queued_in_memory"] == 1000  # queued_per_tenant
    assert empty["cursor_page_ms"] is None and big["cursor_page_ms"] > 0
    assert big["small_job_ticks_after_room"] is not None
    assert len(big["ingest_ticks_ms"]) == 5
    assert data["restart"]["active_jobs"] > 1500 and data["restart"]["jobs_in_memory"] < 1500
    assert set(data["targets"]) == {"tick_p50_at_most_2x_empty", "no_ingest_tick_over_500_ms",
                                    "pages_under_50_ms", "restart_under_10_s",
                                    "small_job_within_one_tick"}
    assert "backlog 1,500" in out.stderr  # progress goes to stderr, never into the JSON
