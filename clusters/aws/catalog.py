"""AWS prices the EC2 API does not give: on-demand list prices (spot prices it does give)."""

from __future__ import annotations

# On-demand USD/hour in us-east-1 (public price list); override with ``on_demand_prices``.
ON_DEMAND_USD_PER_HOUR: dict[str, float] = {
    "g4dn.xlarge": 0.526, "g4dn.12xlarge": 3.912, "g5.xlarge": 1.006, "g5.12xlarge": 5.672,
    "g5.48xlarge": 16.288, "g6.xlarge": 0.8048, "g6e.xlarge": 1.861, "p3.2xlarge": 3.06,
    "p3.8xlarge": 12.24, "p4d.24xlarge": 32.7726, "p5.48xlarge": 98.32,
}


def list_prices(instance_type: str) -> tuple[float | None, float] | None:
    """(None, on-demand USD/hour) of an EC2 instance type (spot has no list price); None if unknown."""
    on_demand = ON_DEMAND_USD_PER_HOUR.get(instance_type)
    return None if on_demand is None else (None, on_demand)
