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


def test_the_egress_aware_policy_charges_only_moves_between_regions() -> None:
    from policies.deadline import DeadlineTask, Kind, Observation, ZoneView
    from policies.egress import GCP_INTER_CONTINENT_USD_PER_GB
    from policies.egressaware import EgressAwareSpotplane, places_of

    task = DeadlineTask(10.0, 20.0, 0.1, on_demand_price=30.0, spot_price=10.0)
    zones = ["us-east4-a", "us-east4-b", "europe-west1-c"]
    policy = EgressAwareSpotplane(task, tick_hours=0.1, checkpoint_gb=100.0,
                                  places=places_of(zones, ["gcp"] * 3,
                                                   ["us-east4", "us-east4", "europe-west1"]))
    assert policy.egress("europe-west1-c") == 0.0  # nothing written yet
    views = tuple(ZoneView(z, True, 10.0, 30.0) for z in zones)
    policy.decide(Observation(elapsed_hours=0.1, progress_hours=0.0, state=Kind.SPOT,
                              zone="us-east4-a", spot_available=True, zones=views))
    assert policy.egress("us-east4-b") == 0.0
    assert policy.egress("europe-west1-c") == pytest.approx(100 * GCP_INTER_CONTINENT_USD_PER_GB)
    assert policy._score(views[2]) > policy._score(views[1])
