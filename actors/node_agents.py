"""Node agents: one pinned :class:`~actors.node.NodeActor` per selected Ray node.

A :class:`NodeAgentSupervisor` actor (started by ``actors.runtime.start_control_plane`` for the
real fleets aws, gcp and ray, never for the simulated one) re-checks the cluster's nodes every
few seconds and keeps exactly one agent, named ``spotplane-node-<ray node id>``, on each alive
node the :class:`NodeRule` selects (default: nodes with a ``spot`` or ``on_demand`` resource, as
every worker type of ``ray-cluster.yaml`` has; the head's ``spotplane_head`` excludes it). Each
agent is pinned with ``node_actor_options`` (hard node affinity, so it dies with its node) and
watches its node's metadata server, calling ``listener.notice(instance_id, seconds_left)`` on a
preemption notice. The agent's instance id is what the fleet calls the node: the EC2 instance
id or GCE VM name read from the metadata server (``identity="metadata"``, fleets aws and gcp),
or the Ray node id (``identity="ray_node"``, the ray fleet, whose controller maps it to a slot).

Agents of nodes that are gone are forgotten (killed if still there). Agents are owned by the
supervisor, so they go with it. The decision is the pure :func:`plan_agents`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ray

from actors.node import RemoteNodeActor, node_actor_options
from clusters.providers import Capability, notice_clouds, registered
from controlplane.core.clock import Clock, WallClock
from controlplane.core.config import load_settings
from controlplane.core.errors import InvalidInput

log = logging.getLogger(__name__)

AGENT_PREFIX = "spotplane-node-"
SUPERVISOR_NAME = "spotplane-node-agents"
NODE_CLOUD_ENV = "SPOTPLANE_NODE_CLOUD"
IDENTITIES = ("metadata", "ray_node")
HEAD_RESOURCE = "node:__internal_head__"

RayNode = Mapping[str, Any]  # state-API shape: node_id, state, is_head_node, resources_total
NodeSelector = Callable[[RayNode], bool]
NodeLister = Callable[[], list[dict[str, Any]]]


@dataclass(frozen=True)
class NodeRule:
    """Which Ray nodes get an agent: any of ``require_any`` resources, none of ``exclude``."""

    require_any: tuple[str, ...] = ("spot", "on_demand")
    exclude: tuple[str, ...] = ("spotplane_head",)
    include_head: bool = False

    def __call__(self, node: RayNode) -> bool:
        res = node.get("resources_total") or {}
        if node.get("is_head_node") and not self.include_head:
            return False
        if any(float(res.get(k, 0.0)) > 0 for k in self.exclude):
            return False
        return any(float(res.get(k, 0.0)) > 0 for k in self.require_any)


@dataclass(frozen=True)
class AgentPlan:
    """What one reconcile pass does: start agents on ``start``, forget those of ``forget``."""

    start: frozenset[str]
    forget: frozenset[str]


def plan_agents(nodes: Iterable[RayNode], running: Iterable[str], select: NodeSelector,
                blocked: Iterable[str] = ()) -> AgentPlan:
    """Alive selected nodes without an agent are started (unless ``blocked``: a start failed
    recently); agents of nodes that are dead, gone or no longer selected are forgotten."""
    wanted = {str(n["node_id"]) for n in nodes if n.get("state") == "ALIVE" and select(n)}
    have = set(running)
    return AgentPlan(frozenset(wanted - have - set(blocked)), frozenset(have - wanted))


def agent_name(ray_node_id: str) -> str:
    return f"{AGENT_PREFIX}{ray_node_id}"


def ray_nodes() -> list[dict[str, Any]]:
    """The cluster's nodes from the GCS (``ray.nodes()``, no dashboard needed), state-API shaped."""
    out = []
    for n in ray.nodes():
        res = {str(k): float(v) for k, v in (n.get("Resources") or {}).items()}
        out.append({"node_id": str(n["NodeID"]), "state": "ALIVE" if n.get("Alive") else "DEAD",
                    "is_head_node": bool(n.get("IsHeadNode")) or HEAD_RESOURCE in res,
                    "resources_total": res})
    return out


def node_agent_cloud(fleet: str, node_cloud: str | None = None,
                     env: Mapping[str, str] | None = None) -> str | None:
    """The metadata server the agents of ``fleet`` read: the fleet's own where its provider
    watches notices (aws, gcp), ``node_cloud`` or ``$SPOTPLANE_NODE_CLOUD`` (default aws) where
    its instances are Ray nodes (ray), else None (the simulated fleet: no agents)."""
    entry = registered().get(fleet)
    if entry is not None and entry.can(Capability.NOTICES):
        return fleet
    if entry is None or not entry.can(Capability.RAY_NODES):
        return None
    configured = load_settings().node_cloud if env is None else env.get(NODE_CLOUD_ENV)
    cloud = node_cloud or configured or "aws"
    if cloud not in notice_clouds():
        raise InvalidInput("node_cloud", f"no metadata server for {cloud!r}",
                           fix=f"set {NODE_CLOUD_ENV} to one of {', '.join(notice_clouds())} "
                               "(the cloud the Ray nodes run on)")
    return cloud


def node_agent_identity(fleet: str) -> str:
    """How agents name their node: instances that are Ray nodes (the ray fleet's slots) by their
    Ray node id, others by the id their metadata server gives."""
    entry = registered().get(fleet)
    return "ray_node" if entry is not None and entry.can(Capability.RAY_NODES) else "metadata"


class NodeAgentSupervisor:
    """Keeps one NodeActor per selected alive Ray node (thin: :func:`plan_agents` decides)."""

    def __init__(self, listeners: Sequence[tuple[Any, str]], cloud: str, namespace: str, *,
                 base_url: str | None = None, rule: NodeSelector | None = None,
                 identity: str = "metadata", every_s: float = 5.0, retry_s: float = 30.0,
                 autostart: bool = True, list_nodes: NodeLister | None = None,
                 clock: Clock | None = None) -> None:
        if cloud not in notice_clouds():
            raise InvalidInput("cloud", f"no metadata watcher for {cloud!r}",
                               fix=f"use one of {', '.join(notice_clouds())}")
        if identity not in IDENTITIES:
            raise InvalidInput("identity", f"unknown identity {identity!r}", fix=f"use one of {IDENTITIES}")
        if every_s <= 0:
            raise InvalidInput("every_s", f"must be > 0, got {every_s}", fix="re-check every few seconds")
        self.listeners = list(listeners)
        self.cloud, self.namespace, self.base_url = cloud, namespace, base_url
        self.rule: NodeSelector = rule or NodeRule()
        self.identity, self.every_s, self.retry_s = identity, every_s, retry_s
        self.list_nodes: NodeLister = list_nodes or ray_nodes
        self.clock = clock or WallClock()
        self.agents: dict[str, tuple[Any, str]] = {}  # ray node id -> (handle, instance id)
        self.starting: dict[str, tuple[Any, Any]] = {}  # ray node id -> (handle, watch ref)
        self.failed: dict[str, tuple[float, str]] = {}  # ray node id -> (retry at, error)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="node-agents", daemon=True)
        if autostart:
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile()
            except Exception:  # noqa: BLE001 - one bad pass (GCS hiccup) must not end the loop
                log.exception("node agents: reconcile failed")
            self._stop.wait(self.every_s)

    def reconcile(self) -> dict[str, Any]:
        """One pass: collect finished starts, then start missing agents and forget stale ones."""
        with self._lock:
            if self._stop.is_set():
                return self.status()
            self._collect()
            now = self.clock.now()
            nodes = self.list_nodes()
            alive = {str(n["node_id"]) for n in nodes if n.get("state") == "ALIVE"}
            self.failed = {nid: f for nid, f in self.failed.items() if nid in alive}
            blocked = [nid for nid, (at, _) in self.failed.items() if at > now]
            plan = plan_agents(nodes, [*self.agents, *self.starting], self.rule, blocked)
            for node_id in sorted(plan.forget):
                self._forget(node_id)
            for node_id in sorted(plan.start):
                self._start(node_id)
            return {**self.status(), "started": sorted(plan.start), "forgotten": sorted(plan.forget)}

    def _start(self, node_id: str) -> None:

        instance_id = node_id if self.identity == "ray_node" else ""
        remote: Any = RemoteNodeActor
        agent = remote.options(**node_actor_options(node_id, agent_name(node_id), self.namespace)).remote(
            node_id, instance_id)
        self.starting[node_id] = (agent, agent.watch_metadata.remote(self.cloud, self.listeners, self.base_url))

    def _collect(self) -> None:
        for node_id, (agent, ref) in list(self.starting.items()):
            ready, _ = ray.wait([ref], timeout=0)
            if not ready:
                continue
            del self.starting[node_id]
            try:
                instance_id = str(ray.get(ref))
            except Exception as exc:  # noqa: BLE001 - no metadata server, node died while starting
                lines = str(exc).strip().splitlines() or [repr(exc)]
                self.failed[node_id] = (self.clock.now() + self.retry_s, lines[-1])
                log.warning("node agent on %s did not start (retry in %.0f s): %s", node_id, self.retry_s,
                            self.failed[node_id][1])
                _kill(agent)
                continue
            self.failed.pop(node_id, None)
            self.agents[node_id] = (agent, instance_id)
            log.info("node agent on %s watches %s metadata for %s", node_id, self.cloud, instance_id)

    def _forget(self, node_id: str) -> None:
        agent = (self.agents.pop(node_id, None) or self.starting.pop(node_id, None) or (None,))[0]
        self.failed.pop(node_id, None)
        if agent is not None:
            _kill(agent)
        log.info("node agent on %s forgotten (node gone or no longer selected)", node_id)

    def status(self) -> dict[str, Any]:
        return {"cloud": self.cloud, "identity": self.identity,
                "agents": {nid: iid for nid, (_, iid) in self.agents.items()},
                "starting": sorted(self.starting),
                "failed": {nid: err for nid, (_, err) in self.failed.items()}}

    def agent_names(self) -> dict[str, str]:
        """Ray node id -> the agent's actor name (in this supervisor's namespace)."""
        return {nid: agent_name(nid) for nid in self.agents}

    def stop(self) -> None:
        """Stop re-checking, then stop and kill every agent."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.every_s + 30)
        with self._lock:
            for agent, _ in self.agents.values():
                try:
                    ray.get(agent.stop_watching.remote(), timeout=10)
                except Exception as exc:  # noqa: BLE001 - node already gone
                    log.debug("stop_watching: %s", exc)
            for node_id in [*self.agents, *self.starting]:
                agent = (self.agents.pop(node_id, None) or self.starting.pop(node_id))[0]
                _kill(agent)


def _kill(agent: Any) -> None:
    try:
        ray.kill(agent, no_restart=True)
    except Exception as exc:  # noqa: BLE001 - already dead is fine
        log.debug("kill node agent: %s", exc)


RemoteNodeAgentSupervisor = ray.remote(  # type: ignore[call-overload]
    num_cpus=0, max_restarts=-1, max_concurrency=4)(NodeAgentSupervisor)


def start_node_agents(listeners: Sequence[tuple[Any, str]], cloud: str, namespace: str, *,
                      detached: bool = True, base_url: str | None = None,
                      rule: NodeSelector | None = None, identity: str = "metadata",
                      every_s: float = 5.0) -> Any:
    """Start (or find) the supervisor, softly pinned to this driver's node (the head)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    opts: dict[str, Any] = {"name": SUPERVISOR_NAME, "namespace": namespace, "get_if_exists": True,
                            "scheduling_strategy": NodeAffinitySchedulingStrategy(
                                node_id=ray.get_runtime_context().get_node_id(), soft=True)}
    if detached:
        opts["lifetime"] = "detached"
    remote: Any = RemoteNodeAgentSupervisor
    return remote.options(**opts).remote(listeners, cloud, namespace, base_url=base_url, rule=rule,
                                         identity=identity, every_s=every_s)


def stop_node_agents(supervisor: Any | None = None, namespace: str = "spotplane") -> None:
    """Stop the supervisor (its agents first) and kill it; quiet when there is none."""
    if supervisor is None:
        try:
            supervisor = ray.get_actor(SUPERVISOR_NAME, namespace=namespace)
        except ValueError:
            return
    try:
        ray.get(supervisor.stop.remote(), timeout=60)
    except Exception as exc:  # noqa: BLE001 - already dead is fine
        log.debug("node agent supervisor stop: %s", exc)
    _kill(supervisor)
