"""TenantActor: one tenant's jobs, usage and limits, and its demand history for the forecaster.

Thin over the store (the durable truth): the controller records demand each tick into the store;
the actor answers usage questions and serves the hourly history the ForecasterActor refits on.
"""

from __future__ import annotations

from typing import Any

import ray

from controlplane.core.models import ACTIVE_STATES, JobState
from controlplane.store import Store


class TenantActor:
    def __init__(self, db_path: str, tenant_id: str) -> None:
        self.store = Store(db_path)
        self.tenant = self.store.get_tenant(tenant_id)

    def usage(self) -> dict[str, Any]:
        """GPUs held and jobs per state, against the tenant's GPU limit."""
        jobs = self.store.list_jobs(self.tenant.id, state=ACTIVE_STATES, limit=100_000)
        holding = {JobState.STARTING, JobState.RUNNING, JobState.CHECKPOINTING}
        by_state: dict[str, int] = {}
        for j in jobs:
            by_state[j.state.value] = by_state.get(j.state.value, 0) + 1
        return {"tenant_id": self.tenant.id, "max_gpus": self.tenant.max_gpus,
                "gpus_in_use": sum(j.gpus for j in jobs if j.state in holding),
                "jobs": by_state}

    def history(self, hours: int, until: float, kind: str = "hp") -> list[float]:
        """Mean GPUs demanded per hour (hp or spot) over the ``hours`` hours before ``until``."""
        return self.store.demand_history(self.tenant.id, hours, until, kind)


RemoteTenantActor = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)(TenantActor)


def tenant_actor(db_path: str, tenant_id: str, namespace: str, detached: bool = True) -> Any:
    """The (named, get-or-create) TenantActor of ``tenant_id``."""
    opts: dict[str, Any] = {"name": f"spotplane-tenant-{tenant_id}", "namespace": namespace,
                            "get_if_exists": True}
    if detached:
        opts["lifetime"] = "detached"
    return RemoteTenantActor.options(**opts).remote(db_path, tenant_id)
