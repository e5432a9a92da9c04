"""Spot VM lifetime models, one per cloud, each from its cloud's package: what hot spares, VM
reuse by age and the checkpoint planner of simulated jobs all plan with.

A cloud's package registers how its VMs live (``spot_lifetimes`` of
:func:`clusters.providers.fleet_provider`: GCP ends the fit at Google's 24 h stop); a cloud
without one is memoryless (a VM's age does not matter there).
"""

from __future__ import annotations

from collections.abc import Mapping

from clusters.fleet import FleetProvider
from clusters.providers import registered
from policies.preemption import PreemptionModel, default_gce_model


def fitted_model(fleet: FleetProvider) -> PreemptionModel:
    """The model the fleet draws spot lifetimes from (the simulated fleet's), else seed 001's
    GCE fit (``default_gce_model``)."""
    model = fleet.lifetimes
    return model if isinstance(model, PreemptionModel) else default_gce_model()


def lifetime_models(fleet: FleetProvider) -> dict[str, PreemptionModel]:
    """Each cloud's spot lifetime model: its package's ``spot_lifetimes`` of the fitted model
    (:func:`fitted_model`); memoryless clouds have none."""
    fitted = fitted_model(fleet)
    return {cloud: entry.spot_lifetimes(fitted) for cloud, entry in registered().items()
            if entry.spot_lifetimes is not None}


def planning_model(models: Mapping[str, PreemptionModel]) -> PreemptionModel:
    """The one model the checkpoint planner of simulated spot jobs plans with on every cloud:
    the first cloud model there is (GCP's; AWS VMs are memoryless and have none)."""
    return next(iter(models.values()))
