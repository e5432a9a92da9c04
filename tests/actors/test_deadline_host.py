"""DeadlinePolicyActors: one per job up to a cap, then shared; state survives the actor."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.deadline import RayDeadlineHost
from controlplane.reconcile.policyhost import PolicyRequest
from controlplane.store import Store
from policies.deadline import DeadlineTask, Kind, Observation

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_jobs_beyond_the_cap_share_actors_and_state_survives(ray_cluster: Any,
                                                            tmp_path: Path) -> None:
    Store(tmp_path / "spotplane.db").close()
    ns = f"t-{uuid.uuid4().hex[:8]}"
    host = RayDeadlineHost(str(tmp_path / "spotplane.db"), namespace=ns, detached=False,
                           max_actors=2, overflow_shards=1)
    task = DeadlineTask(10.0, 12.0, 0.1, 3.0, 1.0, 1)
    idle_behind = Observation(6.0, 2.0, Kind.IDLE, None, False)  # behind: UP goes on-demand
    try:
        reqs = [PolicyRequest(f"job-{i}", "uniform_progress", task, idle_behind, 1 / 60)
                for i in range(5)]
        acts = host.decide(reqs)
        assert {a.kind for a in acts.values()} == {Kind.ON_DEMAND}
        assert len(host.handles) == 3  # two one-job actors + one shared
        assert sorted(ray.get(host.handles["shard-0"].jobs.remote())) == ["job-2", "job-3",
                                                                          "job-4"]
        assert Store(tmp_path / "spotplane.db").policy_state("job-0") is not None
        host.forget(["job-0"])
        assert len(host.handles) == 2
    finally:
        host.shutdown()
