"""A standby controller on a real local Ray: the active controller's process is SIGKILLed, the
lease expires, a waiting controller takes it, bumps the epoch and finishes every job from the
store, none lost and no node launched twice; the dead controller's epoch is refused."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.runtime import start_control_plane, stop_control_plane
from controlplane.core.errors import Conflict
from controlplane.core.models import TERMINAL_STATES, JobSpec
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.store import Store
from tests.actors.test_control_plane import _assert_exactly_once, _jobs, _settings, _wait_done
from tests.support import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]
TTL_S = 3.0


def test_standby_takes_over_from_a_sigkilled_controller(ray_cluster: Any, tmp_path: Path) -> None:
    s = _settings(tmp_path, policy_actors=False, autostart=True, speed=3600.0, standby=True,
                  lease_ttl_seconds=TTL_S, fleet_options={"gcp": False},
                  controller=ControllerSettings(pool_nodes={"V100": 6}))
    store = Store(s.db_path)
    t, _ = store.create_tenant("standby")
    ids = _jobs(store, t.id)
    h = start_control_plane(s)
    try:
        before = h.status()
        assert before["active"] and before["epoch"] == 1
        standby = ray.get(h.standby.status.remote())
        assert not standby["active"] and standby["ticks"] == 0  # waiting on the lease
        wait_until(lambda: store.job_counts().get("RUNNING", 0) > 0
                   and store.control_time() > 3600, 60, "a job running")
        assert any(store.get_job(i).state not in TERMINAL_STATES for i in ids)
        os.kill(before["pid"], signal.SIGKILL)
        killed = time.monotonic()
        at_kill = store.control_time()
        wait_until(lambda: store.controller_lease()["epoch"] > 1 and store.control_time() > at_kill,
                   TTL_S + 20, "a newer epoch's committed tick")
        took_s = time.monotonic() - killed
        assert took_s >= TTL_S * 0.5  # no one took the lease before it could have expired
        lease = store.controller_lease()
        assert lease["holder"].startswith("spotplane-controller-standby:")  # the successor won
        with pytest.raises(Conflict, match="epoch 1 is fenced"):
            store.commit(epoch=1)  # the dead controller's writes would be refused
        with pytest.raises(Conflict, match="taken by"):
            store.renew_controller_lease(before["holder"], 1, TTL_S)
        active = h.active()
        assert active is not None
        _wait_done(store, ids, 120)
        ray.get(active.pause.remote())  # no new tick (an idle node's release) while we count
        wait_until(lambda: not store.pending_intents(), 30, "the last tick's intents carried out")
        status = ray.get(active.status.remote())
        assert status["epoch"] == lease["epoch"] and status["holder"] == lease["holder"]
        _assert_exactly_once(store, ids, ray.get(active.launches_per_intent.remote()))
        # the standby holds the lease; Ray restarted the killed one, which now waits on it
        assert active is h.standby
        restarted = ray.get(h.controller.status.remote())
        assert not restarted["active"] and restarted["pid"] != before["pid"]
    finally:
        stop_control_plane(h)


def test_a_standby_does_not_take_a_renewed_lease(ray_cluster: Any, tmp_path: Path) -> None:
    s = _settings(tmp_path, policy_actors=False, autostart=True, speed=3600.0, standby=True,
                  lease_ttl_seconds=TTL_S, fleet_options={"gcp": False},
                  controller=ControllerSettings(pool_nodes={"V100": 2}))
    store = Store(s.db_path)
    t, _ = store.create_tenant("steady")
    store.submit_job(t.id, JobSpec(name="j", kind="spot", compute_hours=1, accelerator="V100"), now=0.0)
    h = start_control_plane(s)
    try:
        first = store.controller_lease()
        wait_until(lambda: store.controller_lease()["until"] > first["until"] + 3 * TTL_S, 60,
                   "three lease lifetimes")
        assert store.controller_lease()["epoch"] == 1  # renewed every ttl/4: the standby waits
        assert not ray.get(h.standby.status.remote())["active"]
    finally:
        stop_control_plane(h)


def test_a_fenced_controller_stands_by_and_takes_the_lease_back_when_it_expires(tmp_path: Path) -> None:
    from actors.controller import PRIMARY_GRACE_S, ControllerActor

    s = _settings(tmp_path, policy_actors=False, autostart=True, speed=3600.0, lease_ttl_seconds=1.0,
                  fleet_options={"gcp": False}, controller=ControllerSettings(pool_nodes={"V100": 2}))
    store = Store(s.db_path)
    actor = ControllerActor(s.actor_config())  # in this process: no Ray needed
    try:
        wait_until(lambda: actor.status()["ticks"] > 3, 30, "ticks")
        assert store.claim_controller_lease("intruder", 1.0, force=True) == 2  # and never renews
        wait_until(lambda: not actor.status()["active"], 10, "the controller stands by")
        assert "epoch 1" in (actor.status()["error"] or "")
        with pytest.raises(Conflict, match="stands by"):
            actor.tick()
        wait_until(lambda: actor.status()["active"], 1.0 + PRIMARY_GRACE_S + 10, "the lease back")
        assert actor.status()["epoch"] == 3 and store.controller_lease()["holder"] == actor.holder
        ticks = actor.status()["ticks"]
        wait_until(lambda: actor.status()["ticks"] > ticks, 10, "ticking again")
    finally:
        actor.shutdown()
