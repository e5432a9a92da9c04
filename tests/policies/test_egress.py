"""Egress rates between regions and clouds, as the clouds publish them."""

from __future__ import annotations

import pytest

from policies.egress import (
    AWS_INTER_REGION_USD_PER_GB,
    AWS_INTERNET_USD_PER_GB,
    GCP_INTER_CONTINENT_USD_PER_GB,
    GCP_INTER_REGION_USD_PER_GB,
    continent,
    egress_rate,
    egress_usd,
)


@pytest.mark.parametrize(("src", "dst", "rate"), [
    (("aws", "us-east-1"), ("aws", "us-east-1"), 0.0),
    (("aws", "us-east-1"), ("aws", "us-west-2"), AWS_INTER_REGION_USD_PER_GB),
    (("gcp", "us-central1"), ("gcp", "us-east4"), GCP_INTER_REGION_USD_PER_GB),
    (("gcp", "us-central1"), ("gcp", "europe-west4"), GCP_INTER_CONTINENT_USD_PER_GB),
    (("aws", "us-east-1"), ("gcp", "us-east4"), AWS_INTERNET_USD_PER_GB),
    (("local", "a"), ("local", "b"), 0.0),
])
def test_rate_by_where_the_bytes_go(src: tuple[str, str], dst: tuple[str, str], rate: float) -> None:
    assert egress_rate(*src, *dst) == rate


def test_bill_is_bytes_times_rate() -> None:
    assert egress_usd(5 * 10**9, "aws", "us-east-1", "aws", "us-west-2") == pytest.approx(0.10)
    assert continent("asia-east1") == "asia" and continent("northamerica-northeast1") == "na"
