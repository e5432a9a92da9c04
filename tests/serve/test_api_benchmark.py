"""`python -m benchmarks.api` end to end at a small size: every accepted submission is stored
(the throughput/latency targets are the benchmark's business, not a timed test's)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_api_benchmark_counts_add_up(ray_cluster) -> None:  # type: ignore[no-untyped-def]
    from benchmarks.api import run

    result = run(requests=64, clients=16, warmup=8)
    assert result["clients"] == 16
    assert result["submitted"] == result["accepted"] == result["stored"] == 64
    assert result["_in_store_total"] == 64 + 8  # the warm-up jobs and nothing else
    assert len(result["_latencies"]) == 64
    assert 0 < result["p50_ms"] <= result["p99_ms"]
    assert result["per_second"] > 0


def test_api_benchmark_on_postgresql_with_two_replicas(ray_cluster, pg_url: str) -> None:  # type: ignore[no-untyped-def]
    from benchmarks.api import run

    result = run(requests=32, clients=8, warmup=8, replicas=2, db=pg_url)
    assert result["replicas"] == 2
    assert result["submitted"] == result["accepted"] == result["stored"] == 32
    assert result["_in_store_total"] == 32 + 8


def test_api_flood_benchmark_reports_both_tenants(ray_cluster) -> None:  # type: ignore[no-untyped-def]
    from benchmarks.api import flood

    result = flood(seconds=4.0, clients=4, quiet_s=2.0, a_jobs=50, b_jobs=5)
    assert result["max_in_flight_per_tenant"] == 1 and result["clients"] == 4
    assert result["b_quiet_requests"] > 0 and result["b_flood_requests"] > 0
    assert result["a_served"] > 0 and result["a_other"] == 0
    assert 0 < result["quiet_p50_ms"] <= result["quiet_p99_ms"]
    assert 0 < result["flood_p50_ms"] <= result["flood_p99_ms"]
    ratio = result["flood_p99_ms"] / result["quiet_p99_ms"]  # of the rounded p99s: near enough
    assert result["flood_over_quiet"] == pytest.approx(ratio, rel=0.02, abs=0.01)
