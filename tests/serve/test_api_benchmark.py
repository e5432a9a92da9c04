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
