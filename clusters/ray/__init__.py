"""Ray: the fleet provider that asks the Ray autoscaler for whole nodes of its node types, priced
from the catalog of the cloud each node type runs on."""

from clusters.ray.fleet import RayAutoscalerFleet

__all__ = ["RayAutoscalerFleet"]
