"""Fast smoke of ``python -m benchmarks.scheduler``: JSON shape, a short real replay, scale mode."""

from __future__ import annotations

import json

import pytest

from benchmarks import scheduler as bench

KEYS = {"hp_jct", "hp_jct_p99", "hp_jqt", "spot_jct", "spot_jqt", "eviction_rate", "allocation_rate"}


@pytest.mark.slow
def test_compare_json_shape_on_a_short_gfs_a100_replay(capsys: pytest.CaptureFixture[str]) -> None:
    rc = bench.main(["--workload", "gfs-a100-high", "--days", "0.5", "--nodes", "24",
                     "--schedulers", "gfs,yarn_cs", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)  # exactly one JSON object on stdout
    assert out["workload"] == "gfs-a100-high" and set(out["schedulers"]) == {"gfs", "yarn_cs"}
    for m in out["schedulers"].values():
        assert set(m) == KEYS
        assert 0 <= m["eviction_rate"] <= 1 and 0 < m["allocation_rate"] <= 1 and m["hp_jct"] > 0


def test_targets_logic() -> None:
    base = dict.fromkeys(KEYS, 1.0)
    res = {"gfs": {**base, "spot_jqt": 0.5, "eviction_rate": 0.1, "hp_jqt": 0.4, "spot_jct": 1.0},
           "yarn_cs": {**base, "eviction_rate": 0.2}, "gfs_s": {**base, "spot_jct": 2.0}}
    t = bench.targets(res)
    assert t["lowest spot JQT"] and t["HP JQT >= 50% below YARN-CS"] and t["gfs_s loses on spot JCT"]
    res["gfs"]["allocation_rate"] = 0.5
    assert not bench.targets(res)["allocation rate >= YARN-CS"]


def test_bad_scheduler_name_is_refused() -> None:
    from controlplane.errors import InvalidInput

    with pytest.raises(InvalidInput, match="scheduler"):
        bench.main(["--workload", "gfs-a100-low", "--schedulers", "nope", "--json"])


def test_plot_uses_a_log_scale_when_times_span_orders_of_magnitude(tmp_path) -> None:  # type: ignore[no-untyped-def]
    base = dict.fromkeys(KEYS, 1.0)
    res = {"gfs": {**base, "spot_jqt": 900.0}, "yarn_cs": {**base, "spot_jqt": 400.0},
           "gfs_e": {**base, "spot_jqt": 4.6e6}}
    path = tmp_path / "s.png"
    fig = bench._plot(str(path), "gfs-a100-medium", res)
    assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 10_000
    scales = {ax.get_title(): ax.get_yscale() for ax in fig.axes}
    assert scales["spot JQT (s), log"] == "log" and scales["eviction rate"] == "linear"
    assert scales["spot JCT (s)"] == "linear"  # all 1.0: nothing to squash
