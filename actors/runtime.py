"""Start and stop the control plane's actors: ``start_control_plane(settings) -> handles``.

``spotplane up`` (and the tests) call :func:`start_control_plane` after ``ray.init``; every actor
is named in ``settings.namespace`` and, by default, detached (it outlives the driver) and
restarted by Ray on failure. All state is in ``state_dir``: ``spotplane.db`` (the store, also
the Serve API's) and ``simfleet.db`` (the simulated cloud's own state). ``stop_control_plane``
stops the loop and kills the actors; the state stays for the next start.

On a real fleet (aws, gcp, ray) a node-agent supervisor (``actors/node_agents.py``) also keeps
one pinned NodeActor per selected Ray node, watching that node's metadata server for
preemption notices and telling the controller (``ControllerActor.notice``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import ray

from actors.controller import ControllerConfig, RemoteControllerActor
from actors.execution.config import ExecutorConfig
from actors.forecaster import RemoteForecasterActor
from actors.node_agents import (
    node_agent_cloud,
    node_agent_identity,
    start_node_agents,
    stop_node_agents,
)
from actors.quota import quota_actor
from actors.raylocal import init_local_ray
from controlplane.core.units import DB_FILE
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.store import Store

log = logging.getLogger(__name__)

CONTROLLER_NAME = "spotplane-controller"
STANDBY_NAME = "spotplane-controller-standby"
FORECASTER_NAME = "spotplane-forecaster"


@dataclass
class RuntimeSettings:
    """Everything :func:`start_control_plane` needs."""

    state_dir: Path
    db: str | None = None  # the store: a path or URL (controlplane.store); None: the state dir's
    fleet: str = "sim"  # sim | aws | gcp (clusters.providers)
    speed: float = 3600.0  # simulated seconds per wall second (sim clock); 0 = manual steps
    clock: Literal["sim", "wall"] = "sim"
    start_time: float = 0.0  # simulated epoch of a fresh state dir
    seed: int = 0
    namespace: str = "spotplane"
    detached: bool = True
    fleet_options: dict[str, Any] = field(default_factory=dict)
    controller: ControllerSettings = field(default_factory=ControllerSettings)
    policy_actors: bool = True  # False: deadline policies run inside the controller actor
    policy_actor_shards: int = 0  # 0: one DeadlinePolicyActor per job (up to max, then shared)
    max_policy_actors: int = 16  # one-job actors at most; more jobs share 8 overflow actors
    forecaster: bool = True
    forecast_every_seconds: float = 300.0
    autostart: bool = True  # False: no loop thread (tests drive ControllerActor.step)
    min_tick_wall_seconds: float = 0.002
    crash_after_intents: int = 0  # fault injection (tests): exit once after the n-th launch tick
    executor_factory: str | None = None  # "module:function" -> JobExecutor for entrypoint jobs
    executor_options: ExecutorConfig = field(default_factory=ExecutorConfig)
    node_agents: bool = True  # real fleets only: one NodeActor per selected Ray node
    node_cloud: str | None = None  # ray fleet: aws | gcp (default $SPOTPLANE_NODE_CLOUD, else aws)
    metadata_url: str | None = None  # the agents' metadata server (tests); None: the cloud's own
    node_rule: Callable[[Mapping[str, Any]], bool] | None = None  # None: actors.node_agents.NodeRule()
    node_agents_every_seconds: float = 5.0
    standby: bool = False  # a second ControllerActor that takes the lease when the first dies
    lease_ttl_seconds: float = 10.0  # wall seconds a controller's lease lasts unrenewed
    standby_poll_seconds: float = 0.25  # how often a standby checks whether the lease expired

    @property
    def db_path(self) -> str | Path:
        """Where every actor opens the store: ``db``, else the state directory's SQLite file."""
        return self.db or Path(self.state_dir) / DB_FILE

    def actor_config(self, role: Literal["active", "standby"] = "active") -> ControllerConfig:
        """The controller actor's configuration (the standby's: the same, waiting on the lease)."""
        return ControllerConfig(
            state_dir=Path(self.state_dir), db=str(self.db_path), fleet=self.fleet,
            fleet_options=dict(self.fleet_options), seed=self.seed, clock=self.clock,
            speed=self.speed, start_time=self.start_time,
            min_tick_wall_seconds=self.min_tick_wall_seconds, namespace=self.namespace,
            detached=self.detached, controller=self.controller, policy_actors=self.policy_actors,
            policy_actor_shards=self.policy_actor_shards, max_policy_actors=self.max_policy_actors,
            autostart=self.autostart, crash_after_intents=self.crash_after_intents,
            executor_factory=self.executor_factory, executor_options=self.executor_options,
            standby=self.standby, lease_ttl_seconds=self.lease_ttl_seconds,
            standby_poll_seconds=self.standby_poll_seconds, role=role,
            actor_name=STANDBY_NAME if role == "standby" else CONTROLLER_NAME)


@dataclass
class ControlPlaneHandles:
    """Handles of the running actors (``controller.status.remote()`` etc.)."""

    controller: Any
    quota: Any | None
    forecaster: Any | None
    settings: RuntimeSettings
    db_path: str | Path
    node_agents: Any | None = None  # NodeAgentSupervisor (real fleets)
    standby: Any | None = None  # the standby ControllerActor (``RuntimeSettings.standby``)

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = ray.get(self.controller.status.remote())
        return out

    def active(self, timeout_s: float = 10.0) -> Any | None:
        """The controller actor that holds the lease now (None when neither answers so)."""
        for actor in (self.controller, self.standby):
            if actor is None:
                continue
            try:
                if ray.get(actor.status.remote(), timeout=timeout_s)["active"]:
                    return actor
            except Exception as exc:  # noqa: BLE001 - dead or restarting: ask the other
                log.debug("controller status: %s", exc)
        return None


def _opts(name: str, settings: RuntimeSettings) -> dict[str, Any]:
    opts: dict[str, Any] = {"name": name, "namespace": settings.namespace, "get_if_exists": True}
    if settings.detached:
        opts["lifetime"] = "detached"
    return opts


def start_control_plane(settings: RuntimeSettings) -> ControlPlaneHandles:
    """Start (or find, if already running in the namespace) every control-plane actor."""

    if not ray.is_initialized():  # a private local Ray, its actors at the control plane's priority
        init_local_ray(control_plane=True, namespace=settings.namespace)
    Path(settings.state_dir).mkdir(parents=True, exist_ok=True)
    Store(settings.db_path).close()  # create the schema before the actors race for it
    controller = RemoteControllerActor.options(**_opts(CONTROLLER_NAME, settings)).remote(
        settings.actor_config())
    ray.get(controller.status.remote())  # wait until recovered and ticking
    standby = None
    if settings.standby:
        standby = RemoteControllerActor.options(**_opts(STANDBY_NAME, settings)).remote(
            settings.actor_config("standby"))
        ray.get(standby.status.remote())  # started, waiting on the lease
    quota = forecaster = None
    if settings.forecaster:
        pools = dict(settings.controller.pool_nodes)
        per_node = {"V100": 1, "H100": 8}
        per_node.update({z.accelerator: z.accelerator_count for z in Store(settings.db_path).zones()})
        quota = quota_actor(str(settings.db_path), pools, per_node, settings.namespace,
                            settings.detached)
        forecaster = RemoteForecasterActor.options(**_opts(FORECASTER_NAME, settings)).remote(
            str(settings.db_path), quota, settings.namespace,
            every_seconds=settings.forecast_every_seconds, detached=settings.detached)
    agents = _start_node_agents(settings, controller, standby)
    return ControlPlaneHandles(controller, quota, forecaster, settings, settings.db_path, agents,
                               standby)


def _start_node_agents(settings: RuntimeSettings, controller: Any, standby: Any | None = None) -> Any | None:
    """The node-agent supervisor for a real fleet (None for the simulated one, or when off);
    notices go to every controller (the one that holds the lease acts on them)."""

    cloud = node_agent_cloud(settings.fleet, settings.node_cloud)
    if cloud is None or not settings.node_agents:
        return None
    listeners = [(c, "notice") for c in (controller, standby) if c is not None]
    return start_node_agents(listeners, cloud, settings.namespace,
                             detached=settings.detached, base_url=settings.metadata_url,
                             rule=settings.node_rule, identity=node_agent_identity(settings.fleet),
                             every_s=settings.node_agents_every_seconds)


def find_control_plane(namespace: str = "spotplane") -> Any | None:
    """The running ControllerActor of ``namespace`` (None when there is none)."""
    return _find(CONTROLLER_NAME, namespace)


def _find(name: str, namespace: str) -> Any | None:
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None


def stop_control_plane(handles: ControlPlaneHandles | None = None,
                       namespace: str = "spotplane") -> None:
    """Stop the loop cleanly, then kill every spotplane actor of the namespace (state is kept)."""

    ns = handles.settings.namespace if handles is not None else namespace
    if handles is None or handles.node_agents is not None:  # agents first: no notice mid-shutdown
        stop_node_agents(handles.node_agents if handles is not None else None, namespace=ns)
    controller = handles.controller if handles is not None else find_control_plane(ns)
    standby = handles.standby if handles is not None else _find(STANDBY_NAME, ns)
    for actor in (standby, controller):  # the standby first: it must not take over the stop
        if actor is None:
            continue
        try:
            ray.get(actor.shutdown.remote(), timeout=60)
        except Exception as exc:  # noqa: BLE001 - already dead is fine
            log.debug("controller shutdown: %s", exc)
    for info in _named_actors(ns):
        try:
            ray.kill(ray.get_actor(info, namespace=ns), no_restart=True)
        except Exception as exc:  # noqa: BLE001
            log.debug("kill %s: %s", info, exc)


def _named_actors(namespace: str) -> list[str]:
    from ray.util import list_named_actors

    names = []
    for a in list_named_actors(all_namespaces=True):
        if isinstance(a, dict) and a.get("namespace") == namespace and str(
                a.get("name", "")).startswith("spotplane-"):
            names.append(str(a["name"]))
    return names
