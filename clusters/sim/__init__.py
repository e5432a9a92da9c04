"""The simulated fleet: spot zones of AWS and GCP replayed from public traces, with those clouds'
notice lead times and GCP's 24 h Spot VM stop (the embedded default)."""

from clusters.sim.fleet import AWS_COLLECTION, SimulatedFleet

__all__ = ["AWS_COLLECTION", "SimulatedFleet"]
