"""GCP: the Compute Engine fleet provider, its preemption watcher, its price catalog and the
Spot VM lifetime model (a fitted model ended at Google's 24 h stop)."""

from clusters.gcp.fleet import GcpFleet

__all__ = ["GcpFleet"]
