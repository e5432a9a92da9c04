"""Ray: the fleet provider that asks the Ray autoscaler for whole nodes of its node types, priced
from the catalog of the cloud each node type runs on; and the one over N such clusters."""

from clusters.ray.fleet import RayAutoscalerFleet
from clusters.ray.multi import RayClustersFleet

__all__ = ["RayAutoscalerFleet", "RayClustersFleet"]
