"""Smoke test of ``python -m benchmarks.forecast`` on a slice of the real alibaba-dlrm trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import forecast as bench
from clusters.data.catalog import DataCatalog


@pytest.mark.slow
def test_forecast_benchmark_json_on_twelve_real_tenants(
    catalog: DataCatalog, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    png = tmp_path / "fc.png"
    assert bench.main(["--json", "--tenants", "12", "--maxiter", "40", "--stride", "8",
                       "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    res = json.loads(out)  # exactly one JSON object on stdout
    assert set(bench.REQUIRED) <= set(res["models"])
    keys = {"mae", "mse", "rmse", "mape", "maqe_0.9", "maqe_0.95", "coverage_0.95", "train_seconds"}
    for name, m in res["models"].items():
        assert keys <= set(m), name
        assert m["rmse"] ** 2 == pytest.approx(m["mse"])
        assert 0.0 <= m["coverage_0.95"] <= 1.0
    assert res["setup"] == {"tenants": 12, "train_hours": 504, "test_hours": 240, "horizon": 4,
                            "stride": 8, "start_hour_of_week": 120}
    # the last-week peak never under-forecasts a flat tenant, so it covers more than the mean does
    assert res["models"]["last_week_peak"]["coverage_0.95"] > 0.9
    assert res["models"]["orglinear"]["mae"] < res["models"]["last_week_peak"]["mae"]
    assert png.stat().st_size > 10_000


@pytest.mark.parametrize(("args", "err"), [
    (["--models", "nope"], "--models: unknown model(s) nope — use some of orglinear, "),
    (["--stride", "0"], "--stride: must be >= 1, got 0 — see --help"),
    (["--horizon", "241"], "--horizon: the demand has 744 h: no 241-hour forecast fits after the 504 training hours"),
])
def test_arguments_that_forecast_nothing_exit_2(args: list[str], err: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--json", *args]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith(f"python -m benchmarks.forecast: error: {err}")
    assert out.err.count("\n") == 1
