"""A replica whose checkpoint actor dies (it never restarts) keeps training with interval
checkpoints instead of crashing: the SDK's ActorCoordinator falls back."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import ray

from actors.checkpoint import RemoteCheckpointActor
from clusters.artifacts import ArtifactRef
from controlplane.core.clock import SimClock
from controlplane.sdk import ActorCoordinator, IntervalCoordinator

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_a_killed_checkpoint_actor_leaves_interval_checkpoints(ray_cluster: Any) -> None:
    actor = RemoteCheckpointActor.options(  # type: ignore[attr-defined]
        name=f"ckpt-{uuid.uuid4().hex[:8]}", namespace="spotplane-tests").remote(
        "job-x", "r0", work_hours=1.0)
    clock = SimClock(start=0.0)
    coord = ActorCoordinator(actor, poll_s=0.0, fallback=IntervalCoordinator(60.0, clock))
    coord.restored(None)
    deadline = time.monotonic() + 60
    while coord.directive(0.1) is None and time.monotonic() < deadline:
        time.sleep(0.05)  # until the live actor's first answer
    assert not coord.lost
    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + 60
    while not coord.lost and time.monotonic() < deadline:
        coord.directive(0.2)  # never raises: the actor's death is noticed
        time.sleep(0.05)
    assert coord.lost
    clock.advance(59.0)
    d = coord.directive(0.3)
    assert d is not None and not d.checkpoint_now
    clock.advance(1.0)
    d = coord.directive(0.3)
    assert d is not None and d.checkpoint_now and d.reason == "interval"
    ref = ArtifactRef(job_id="job-x", replica_id="r0", t=60.0, seq=1, sha256="0" * 64, size=1,
                      progress=0.3, created_at=60.0)
    assert coord.saved(ref, 0.5) is None
    d = coord.directive(0.3)
    assert d is not None and not d.checkpoint_now  # the interval restarts at the save
    coord.finished()
