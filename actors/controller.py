"""ControllerActor: the reconcile loop in a detached, named Ray actor that restarts on failure.

Its ``__init__`` rebuilds everything from the durable state (the store, the fleet's own state
file), so a restart after ``ray.kill`` or a crash resumes the loop with no job lost, none
duplicated and no node launched twice (pending launch intents are re-applied idempotently).
A background thread ticks every ``tick_seconds`` of control-plane time.

Only the holder of the store's controller lease runs the loop; another thread renews the lease
every ``lease_ttl_seconds / 4``. A standby instance (``role="standby"``) polls the lease and,
once it has expired, claims it (a new fencing epoch) and rebuilds as above; an instance whose
lease was taken stops its loop and stands by.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import threading
import time
import traceback
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import ray

from actors.deadline import RayDeadlineHost
from actors.execution.config import ExecutorConfig
from actors.execution.multicluster import closed_zones
from clusters.bootstrap import RegistryJoins
from clusters.clusterfleet import ClusterGatedFleet
from clusters.providers import make_provider
from controlplane.core.clock import Clock, ManualClock, SimClock, WallClock
from controlplane.core.config import load_settings
from controlplane.core.errors import Conflict
from controlplane.core.units import SIMFLEET_DB
from controlplane.reconcile.contracts import ControllerSettings, JobExecutor
from controlplane.reconcile.controller import Controller
from controlplane.store import Store
from policies.preemption import default_gce_model

log = logging.getLogger(__name__)
PRIMARY_GRACE_S = 1.0  # how long after the lease's expiry a waiting active defers to the standby


@dataclass(frozen=True)
class ControllerConfig:
    """What a :class:`ControllerActor` is started with (``RuntimeSettings.actor_config()``, which
    holds every default); Ray pickles it to the actor's process."""

    state_dir: Path
    db: str  # the store: a path or URL (controlplane.store)
    fleet: str  # a registered fleet provider (clusters.providers)
    fleet_options: Mapping[str, Any]
    seed: int
    clock: Literal["sim", "wall"]
    speed: float  # simulated seconds per wall second (sim clock); 0: as fast as it goes
    start_time: float  # simulated epoch of a fresh state dir
    min_tick_wall_seconds: float
    namespace: str
    detached: bool
    controller: ControllerSettings
    policy_actors: bool  # False: deadline policies run inside the controller actor
    policy_actor_shards: int
    max_policy_actors: int
    autostart: bool  # False: no loop thread (tests drive ControllerActor.step)
    crash_after_intents: int  # fault injection (tests): exit once after the n-th launch tick
    executor_factory: str | None  # "module:function" -> JobExecutor for entrypoint jobs
    executor_options: ExecutorConfig
    standby: bool  # a standby ControllerActor exists beside this one
    lease_ttl_seconds: float  # wall seconds a controller's lease lasts unrenewed
    standby_poll_seconds: float  # how often a standby checks whether the lease expired
    role: Literal["active", "standby"]
    actor_name: str


class ControllerActor:
    """Owns one :class:`Controller`, configured by a :class:`ControllerConfig`."""

    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.state = Path(config.state_dir)
        self.db = config.db
        self.store = Store(self.db)
        # The lease: the active controller renews it every ttl/4 wall seconds; a standby (or a
        # restarted controller of a pair) claims it once it has expired and bumps the epoch.
        self.lease_ttl = config.lease_ttl_seconds
        self.role = config.role
        self.holder = f"{config.actor_name}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.epoch = 0
        self.controller: Controller | None = None
        self.took_over_at: float | None = None  # wall time this instance got the lease
        self.reports: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._lost = threading.Event()  # the heartbeat saw the lease taken by a newer epoch
        self._holding = False  # this instance holds the lease (the heartbeat renews it)
        self.error: str | None = None
        self.tick_failures = 0  # ticks of the loop that raised (logged, the loop goes on)
        self.last_tick_failure: str | None = None
        if self.role == "active" and (not _reconstructed() or not config.standby):
            # the first start, or Ray's restart of the only controller (its old self is dead)
            self._activate(self.store.claim_controller_lease(self.holder, self.lease_ttl, force=True))
        self._thread = threading.Thread(target=self._run, name="reconcile", daemon=True)
        self._beat = threading.Thread(target=self._heartbeat, name="lease", daemon=True)
        if config.autostart:
            self._thread.start()
            self._beat.start()

    def _activate(self, epoch: int | None) -> None:
        """Hold the lease at ``epoch``: rebuild the fleet and the controller from the store."""
        assert epoch is not None
        config, state = self.config, self.state
        self.epoch = epoch
        self._holding = True  # renewed from now on: recovering a big store may outlast the lease
        self.clock = self._clock()
        fleet_opts = dict(config.fleet_options)
        if config.fleet == "sim":
            fleet_opts.setdefault("state_path", str(state / SIMFLEET_DB))
            fleet_opts.setdefault("seed", config.seed)
            fleet_opts.setdefault("lifetime_model", default_gce_model())  # seed 001's GCE fit
        if fleet_opts.get("api_url") and not fleet_opts.get("cluster_joins"):
            # launched nodes boot into the registered workload cluster of their region, read at
            # each launch (a few seconds' cache): a cluster registered later is joined without a restart
            fleet_opts["cluster_joins"] = RegistryJoins(self.store.list_clusters, config.fleet)
        if config.fleet == "ray-clusters":
            # each registered cluster with a ray_config is asked for nodes by its own autoscaler
            fleet_opts.setdefault("registry", self.store.list_clusters)
        # a zone of a workload cluster that takes no new work (draining, unhealthy) is closed
        self.fleet = ClusterGatedFleet(make_provider(config.fleet, clock=self.clock, **fleet_opts),
                                       closed_zones(self.store))
        host = None
        if config.policy_actors:
            host = RayDeadlineHost(self.db, namespace=config.namespace,
                                   shards=config.policy_actor_shards,
                                   max_actors=config.max_policy_actors, detached=config.detached)
        settings = config.controller
        controller = Controller(self.store, self.fleet, self.clock, settings,
                                policy_host=host, epoch=self.epoch, executor=self._executor())
        crash = config.crash_after_intents
        if crash:
            controller.after_barrier = self._crash_hook(state / "crash-injected", int(crash))
        controller.recover()
        self._lost.clear()
        self.controller = controller
        self.took_over_at = time.time()
        log.warning("controller %s holds the lease at epoch %d", self.holder, epoch)

    def _active(self) -> Controller:
        if self.controller is None:
            raise Conflict(f"controller {self.holder} stands by (epoch {self.store.controller_lease()['epoch']} "
                           "is held by another)", fix="ask the controller that holds the lease")
        return self.controller

    def _run(self) -> None:
        """Stand by until the lease is ours, run the loop until fenced, stand by again."""
        # the standby is the successor: a waiting "active" (Ray restarted it) claims only
        # PRIMARY_GRACE_S after the expiry, so it takes over when the standby is gone too
        grace = PRIMARY_GRACE_S if self.role == "active" else 0.0
        while not self._stop.is_set():
            if self.controller is None:
                lease = self.store.controller_lease()  # both times on the database's clock
                expired = lease["now"] > lease["until"] + grace
                epoch = self.store.claim_controller_lease(self.holder, self.lease_ttl) if expired else None
                if epoch is None:
                    self._stop.wait(self.config.standby_poll_seconds)
                    continue
                try:
                    self._activate(epoch)
                except Exception as exc:  # noqa: BLE001 - e.g. fenced while recovering
                    log.exception("taking over at epoch %d failed", epoch)
                    self.error = repr(exc)
                    self._holding = False
                    self._stop.wait(1.0)
                    continue
            self._loop()
            if not self._stop.is_set():  # fenced: another controller holds the lease now
                with self._lock:
                    self.controller = None
                    self._holding = False

    def _heartbeat(self) -> None:
        """Renew the lease every ttl/4 wall seconds while this controller holds it (on the
        controller's own connection: a second one in this process stalled the tick's commits)."""
        while not self._stop.wait(self.lease_ttl / 4):
            if not self._holding or self._lost.is_set():
                continue
            try:
                self.store.renew_controller_lease(self.holder, self.epoch, self.lease_ttl)
            except Conflict as exc:
                log.error("controller loses the lease: %s", exc)
                self._lost.set()
            except Exception:  # noqa: BLE001 - a busy store: try again at the next beat
                log.exception("lease renewal failed")

    def _executor(self) -> JobExecutor | None:
        """The JobExecutor for jobs with an entrypoint: ``executor_factory`` ("module:function",
        called as ``f(executor_options, clock=..., fleet=..., namespace=..., store=...)``)
        or none; ``store`` is this controller's, which holds the packages of a PostgreSQL store."""
        spec = self.config.executor_factory
        if not spec:
            return None
        module, _, name = spec.partition(":")
        factory = getattr(importlib.import_module(module), name)  # the configured function
        executor: JobExecutor = factory(self.config.executor_options, clock=self.clock,
                                        fleet=self.fleet, namespace=self.config.namespace,
                                        store=self.store)
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
        if self.config.clock == "wall":
            return WallClock()
        start = max(self.config.start_time, self.store.control_time())
        return SimClock(start=start, speed=0.0)

    def _loop(self) -> None:
        tick_s = self._active().settings.tick_seconds
        speed = self.config.speed or 3600.0
        min_wall = self.config.min_tick_wall_seconds
        while not self._stop.is_set():
            if self._lost.is_set():
                self.error = f"epoch {self.epoch}: the lease was taken by a newer controller"
                return
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
                record_tick_failure(self.holder, self.epoch, self.tick_failures, exc)
            wait = max(tick_s / speed - (time.monotonic() - t0), min_wall)
            self._stop.wait(wait)

    def tick(self) -> dict[str, Any]:
        """One reconcile tick now (the loop calls it; tests may too)."""
        with self._lock:
            r = asdict(self._active().tick())
        self.reports.append(r)
        del self.reports[:-200]
        return r

    def run_for(self, seconds: float, tick_seconds: float | None = None) -> dict[str, Any]:
        """Manual clock: advance and tick until ``seconds`` more have passed (one call)."""
        dt = tick_seconds or self._active().settings.tick_seconds
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
        c = self.controller
        return {"ticks": c.ticks if c else 0, "now": self.clock.now() if c else None,
                "jobs": len(c.jobs) if c else 0, "nodes": len(c.nodes) if c else 0,
                "epoch": self.epoch, "error": self.error, "active": c is not None,
                "role": self.role, "holder": self.holder, "pid": os.getpid(),
                "took_over_at": self.took_over_at,
                "tick_failures": self.tick_failures, "last_tick_failure": self.last_tick_failure,
                "last": self.reports[-1] if self.reports else None}

    def notice(self, instance_id: str, seconds_left: float) -> None:
        """Listener for NodeActor.watch_metadata: a preemption notice seen on the node. The id is
        the fleet's instance id, or (ray fleet) the Ray node id of the slot it fills. A standby
        ignores it (the agents tell both controllers)."""
        if self.controller is None:
            return
        self._active().external_notice(self._instance_of(instance_id), seconds_left)

    def _instance_of(self, agent_id: str) -> str:
        if agent_id in self._active().by_instance:
            return agent_id
        with self._lock:  # describe() must not race the tick that changes the fleet
            for inst in self.fleet.describe():
                if inst.tags.get("ray_node_id") == agent_id:
                    return inst.instance_id
        return agent_id

    def node_lost(self, instance_id: str, detail: str = "Ray node lost") -> None:
        """The provider reports ``instance_id`` gone now (a simulated fleet's stand-in for a
        cloud's termination event, when the Ray node that instance maps to died)."""
        self._active()
        self.fleet.lose(instance_id, detail)

    def launches_per_intent(self) -> dict[str, int]:
        self._active()
        return self.fleet.instances_per_intent()

    def pause(self) -> None:
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()

    def shutdown(self) -> None:
        """Stop the loop after the current tick (state stays in the store)."""
        self._stop.set()
        for thread in (self._thread, self._beat):
            if thread.is_alive():
                thread.join(timeout=30)
        with self._lock:
            if self.controller is not None:
                self.controller.flush()

    def pid(self) -> int:
        return os.getpid()


def record_tick_failure(holder: str, epoch: int, n: int, exc: BaseException) -> None:
    """Append the ``n``-th failed tick of loop ``holder`` to
    ``$SPOTPLANE_TICK_FAILURES_DIR/<holder>.jsonl`` when that is set
    (:data:`controlplane.core.config.TICK_FAILURES_ENV`): its epoch, the error, the traceback."""
    where = load_settings().tick_failures_dir
    if not where:
        return
    line = {"holder": holder, "epoch": epoch, "n": n, "error": repr(exc),
            "traceback": "".join(traceback.format_exception(exc))[-4000:]}
    try:
        path = Path(where) / (holder.replace(":", "-").replace("/", "-") + ".jsonl")
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
    except OSError:
        log.exception("could not record the failed tick in %s", where)


def _reconstructed() -> bool:
    """Whether Ray restarted this actor (False outside an actor; never starts or joins a Ray)."""
    if not ray.is_initialized():
        return False
    try:
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # noqa: BLE001 - not in a Ray actor (tests build the class directly)
        return False


RemoteControllerActor = ray.remote(  # type: ignore[call-overload]
    num_cpus=0, max_restarts=-1, max_task_retries=-1, max_concurrency=4)(ControllerActor)
