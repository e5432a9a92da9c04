"""benchmarks.controller runs and prints exactly one JSON object with the promised keys."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_controller_benchmark_json_smoke() -> None:
    out = subprocess.run([sys.executable, "-m", "benchmarks.controller", "--json", "--no-ray",
                          "--scale", "0.05", "--ticks", "5"], cwd=REPO, capture_output=True,
                         text=True, timeout=300, check=True)
    data = json.loads(out.stdout)
    assert set(data) == {"nodes", "jobs", "tick_ms_p50", "tick_ms_p99", "policy_actor_rss_mb"}
    assert 20 <= data["jobs"] <= 25 and 40 <= data["nodes"] <= 50  # 25 jobs x 2 workers
    assert 0 < data["tick_ms_p50"] <= data["tick_ms_p99"]
    assert data["policy_actor_rss_mb"] is None


@pytest.mark.slow
def test_controller_growth_fits_an_exponent_over_the_sizes() -> None:
    out = subprocess.run([sys.executable, "-m", "benchmarks.controller", "--json", "--growth",
                          "40x20,130x60", "--ticks", "4"], cwd=REPO, capture_output=True, text=True,
                         timeout=300, check=True)
    data = json.loads(out.stdout)
    assert [r["jobs"] for r in data["sizes"]] == [20, 60]  # every job placed and running
    assert [r["nodes"] for r in data["sizes"]] == [40, 130]  # 2 workers; 10 jobs of 3
    times = [r["tick_ms_p50"] for r in data["sizes"]]
    x = [r["nodes"] + r["jobs"] for r in data["sizes"]]
    slope = (math.log(times[1]) - math.log(times[0])) / (math.log(x[1]) - math.log(x[0]))
    assert data["exponent"] == pytest.approx(slope)  # two points: the fit is the slope
    assert data["db"] == "sqlite" and data["target_exponent"] == 1.2
