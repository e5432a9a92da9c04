"""ControllerActor: the reconcile loop in a detached, named Ray actor that restarts on failure.

Its ``__init__`` rebuilds everything from the durable state (the store, the fleet's own state
file), so a restart after ``ray.kill`` or a crash resumes the loop with no job lost, none
duplicated and no node launched twice (pending launch intents are re-applied idempotently).
A background thread ticks every ``tick_seconds`` of control-plane time.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import ray

from actors.deadline import RayDeadlineHost
from clusters.providers import make_provider
from controlplane.core.clock import Clock, ManualClock, SimClock, WallClock
from controlplane.core.errors import Conflict
from controlplane.core.units import DB_FILE, SIMFLEET_DB
from controlplane.reconcile.contracts import ControllerSettings, JobExecutor
from controlplane.reconcile.controller import Controller
from controlplane.store import Store
from policies.preemption import default_gce_model

log = logging.getLogger(__name__)


class ControllerActor:
    """Owns one :class:`Controller`; ``config`` is ``RuntimeSettings.actor_config()``."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        state = Path(config["state_dir"])
        db = str(config.get("db") or state / DB_FILE)
        self.store = Store(db)
        self.epoch = self.store.take_controller_lease()
        self.clock = self._clock()
        fleet_opts = dict(config.get("fleet_options") or {})
        if config["fleet"] == "sim":
            fleet_opts.setdefault("state_path", str(state / SIMFLEET_DB))
            fleet_opts.setdefault("seed", config.get("seed", 0))
            fleet_opts.setdefault("lifetime_model", default_gce_model())  # seed 001's GCE fit
        self.fleet = make_provider(config["fleet"], clock=self.clock, **fleet_opts)
        host = None
        if config.get("policy_actors", True):

            host = RayDeadlineHost(db, namespace=config["namespace"],
                                   shards=int(config.get("policy_actor_shards", 0)),
                                   max_actors=int(config.get("max_policy_actors", 16)),
                                   detached=bool(config.get("detached", True)))
        settings = ControllerSettings(**config.get("controller", {}))
        self.controller = Controller(self.store, self.fleet, self.clock, settings,
                                     policy_host=host, epoch=self.epoch,
                                     executor=self._executor())
        crash = config.get("crash_after_intents")
        if crash:
            self.controller.after_barrier = self._crash_hook(state / "crash-injected", int(crash))
        self.controller.recover()
        self.reports: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._paused = threading.Event()
        self.error: str | None = None
        self.tick_failures = 0  # ticks of the loop that raised (logged, the loop goes on)
        self.last_tick_failure: str | None = None
        self._thread = threading.Thread(target=self._loop, name="reconcile", daemon=True)
        if config.get("autostart", True):
            self._thread.start()

    def _executor(self) -> JobExecutor | None:
        """The JobExecutor for jobs with an entrypoint: ``executor_factory`` ("module:function",
        called as ``f(clock=..., fleet=..., namespace=..., **executor_options)``) or none."""
        spec = self.config.get("executor_factory")
        if not spec:
            return None
        module, _, name = str(spec).partition(":")
        factory = getattr(importlib.import_module(module), name)  # the configured function
        executor: JobExecutor = factory(clock=self.clock, fleet=self.fleet,
                                        namespace=self.config["namespace"],
                                        **dict(self.config.get("executor_options") or {}))
        return executor

    @staticmethod
    def _crash_hook(marker: Path, nth: int) -> Any:
        """Fault injection for the crash tests: die (once per state dir) right after the
        ``nth`` tick whose launch intents are durable, before any of them is acted on."""
        seen = [0]

        def hook(launches: int) -> None:
            if launches == 0 or marker.exists():
                return
            seen[0] += 1
            if seen[0] >= nth:
                marker.write_text("crashed after writing launch intents\n")
                log.error("fault injection: process exits between intent and launch")
                os._exit(1)

        return hook

    def _clock(self) -> Clock:
        """Wall time, or a simulated clock the loop paces itself (``speed`` sim s per wall s).

        The loop advances the simulated clock by one tick per iteration, so a slow tick slows
        simulated time down instead of skipping it (what the policies see stays exact).
        """
        if self.config.get("clock", "sim") == "wall":
            return WallClock()
        start = max(float(self.config.get("start_time") or 0.0), self.store.control_time())
        return SimClock(start=start, speed=0.0)

    def _loop(self) -> None:
        tick_s = self.controller.settings.tick_seconds
        speed = float(self.config.get("speed", 3600.0)) or 3600.0
        min_wall = float(self.config.get("min_tick_wall_seconds", 0.002))
        while not self._stop.is_set():
            if self._paused.is_set():
                self._stop.wait(0.05)
                continue
            t0 = time.monotonic()
            try:
                if isinstance(self.clock, ManualClock):
                    self.clock.advance(tick_s)
                self.tick()
            except Conflict as exc:  # fenced: a newer controller took over the store
                log.error("controller stops: %s", exc)
                self.error = str(exc)
                return
            except Exception as exc:  # noqa: BLE001 - a bad tick must not kill the loop
                log.exception("tick failed")
                self.error = self.last_tick_failure = repr(exc)
                self.tick_failures += 1
            wait = max(tick_s / speed - (time.monotonic() - t0), min_wall)
            self._stop.wait(wait)

    def tick(self) -> dict[str, Any]:
        """One reconcile tick now (the loop calls it; tests may too)."""
        with self._lock:
            r = asdict(self.controller.tick())
        self.reports.append(r)
        del self.reports[:-200]
        return r

    def run_for(self, seconds: float, tick_seconds: float | None = None) -> dict[str, Any]:
        """Manual clock: advance and tick until ``seconds`` more have passed (one call)."""
        dt = tick_seconds or self.controller.settings.tick_seconds
        steps = max(1, int(round(seconds / dt)))
        r: dict[str, Any] = {}
        for _ in range(steps):
            r = self.step(dt)
        return r

    def step(self, seconds: float) -> dict[str, Any]:
        """Advance a manual (speed 0) clock by ``seconds`` and tick (deterministic tests)."""
        if isinstance(self.clock, ManualClock):
            self.clock.advance(seconds)
        return self.tick()

    def status(self) -> dict[str, Any]:
        return {"ticks": self.controller.ticks, "now": self.clock.now(),
                "jobs": len(self.controller.jobs), "nodes": len(self.controller.nodes),
                "epoch": self.epoch, "error": self.error,
                "tick_failures": self.tick_failures, "last_tick_failure": self.last_tick_failure,
                "last": self.reports[-1] if self.reports else None}

    def notice(self, instance_id: str, seconds_left: float) -> None:
        """Listener for NodeActor.watch_metadata: a preemption notice seen on the node. The id is
        the fleet's instance id, or (ray fleet) the Ray node id of the slot it fills."""
        self.controller.external_notice(self._instance_of(instance_id), seconds_left)

    def _instance_of(self, agent_id: str) -> str:
        if agent_id in self.controller.by_instance:
            return agent_id
        with self._lock:  # describe() must not race the tick that changes the fleet
            for inst in self.fleet.describe():
                if inst.tags.get("ray_node_id") == agent_id:
                    return inst.instance_id
        return agent_id

    def launches_per_intent(self) -> dict[str, int]:
        return self.fleet.instances_per_intent()

    def pause(self) -> None:
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()

    def shutdown(self) -> None:
        """Stop the loop after the current tick (state stays in the store)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        with self._lock:
            self.controller.flush()

    def pid(self) -> int:
        return os.getpid()


RemoteControllerActor = ray.remote(  # type: ignore[call-overload]
    num_cpus=0, max_restarts=-1, max_task_retries=-1, max_concurrency=4)(ControllerActor)
