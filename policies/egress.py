"""What moving a checkpoint between regions or clouds costs: the clouds' public per-GB rates.

A job that leaves cluster A for cluster B reads its freshest checkpoint from A's region in B's:
``egress_usd = bytes / GB * rate(A -> B)`` where the rate is 0 inside one region, the source
cloud's inter-region rate between two of its regions (higher between continents on GCP), and the
source cloud's internet egress rate between two clouds. ``local`` clusters move for free.
"""

from __future__ import annotations

GB = 1e9  # the clouds bill data transfer per GB (AWS) / GiB (GCP); decimal GB here, see below

# AWS, "Data Transfer OUT From Amazon EC2 To Another AWS Region" (us-east-1 and most regions):
# $0.02/GB; "Data Transfer OUT From Amazon EC2 To Internet", first 10 TB / month: $0.09/GB.
# (aws.amazon.com/ec2/pricing/on-demand/, Data Transfer section)
AWS_INTER_REGION_USD_PER_GB = 0.02
AWS_INTERNET_USD_PER_GB = 0.09
# GCP, "Network pricing", VM-to-VM data transfer between regions: within North America (or
# within Europe) $0.02/GiB, between continents (excluding Oceania) $0.08/GiB; Premium Tier
# internet egress, 0-1 TiB / month, worldwide excluding China and Australia: $0.12/GiB.
# (cloud.google.com/vpc/network-pricing)
GCP_INTER_REGION_USD_PER_GB = 0.02
GCP_INTER_CONTINENT_USD_PER_GB = 0.08
GCP_INTERNET_USD_PER_GB = 0.12

_INTERNET = {"aws": AWS_INTERNET_USD_PER_GB, "gcp": GCP_INTERNET_USD_PER_GB}
_CONTINENTS = (("northamerica", "na"), ("us", "na"), ("ca", "na"), ("southamerica", "sa"),
               ("sa", "sa"), ("europe", "eu"), ("eu", "eu"), ("me", "me"), ("africa", "af"),
               ("af", "af"), ("asia", "asia"), ("ap", "asia"), ("australia", "oc"))


def continent(region: str) -> str:
    """The continent of a region or zone name (``us-east-1`` -> ``na``); '' when unknown."""
    head = region.split("-", 1)[0].lower()
    return next((c for prefix, c in _CONTINENTS if head == prefix), "")


def egress_rate(src_cloud: str, src_region: str, dst_cloud: str, dst_region: str) -> float:
    """Dollars per GB moved from (``src_cloud``, ``src_region``) to (``dst_cloud``, ``dst_region``)."""
    if "local" in (src_cloud, dst_cloud) or (src_cloud, src_region) == (dst_cloud, dst_region):
        return 0.0
    if src_cloud != dst_cloud:
        return _INTERNET.get(src_cloud, AWS_INTERNET_USD_PER_GB)
    if src_cloud == "gcp" and continent(src_region) != continent(dst_region):
        return GCP_INTER_CONTINENT_USD_PER_GB
    return GCP_INTER_REGION_USD_PER_GB if src_cloud == "gcp" else AWS_INTER_REGION_USD_PER_GB


def egress_usd(nbytes: int, src_cloud: str, src_region: str, dst_cloud: str,
               dst_region: str) -> float:
    """The bill for moving ``nbytes`` between two places: ``nbytes / GB * egress_rate``."""
    return nbytes / GB * egress_rate(src_cloud, src_region, dst_cloud, dst_region)
