"""Preemption notices of a workload Ray cluster's nodes, watched from a driver of that cluster.

:class:`ClusterNoticeWatch` runs in the driver child of one cluster (:mod:`clusters.ray.driver`):
every ``every_s`` it lists the cluster's nodes from its GCS and keeps exactly one
:class:`NodeWatchActor` on each alive worker node (hard node affinity, so it dies with its node).
Each actor polls its node's metadata server (:mod:`clusters.notices`) and, on a notice, tells
the watch's :class:`NoticeInbox` actor ``(ray node id, seconds left)``; the driver hands what the
inbox holds to the control plane when asked. The decision is the pure :func:`plan_watchers`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from clusters.notices import NoticeWatch, PreemptionNotice
from clusters.providers import notice_clouds, watcher_for
from controlplane.core.errors import InvalidInput

log = logging.getLogger(__name__)

HEAD_RESOURCE = "node:__internal_head__"
WATCH_EVERY_S = 5.0  # seconds between two looks at the cluster's node list
RETRY_S = 30.0  # a watcher whose start failed is not started again on that node before this

RayNode = Mapping[str, Any]  # state-API shape: node_id, state, is_head_node
Notice = tuple[str, float]  # (ray node id, seconds left)


@dataclass(frozen=True)
class WatchPlan:
    """One pass: start watchers on ``start``, forget those of ``forget``."""

    start: frozenset[str]
    forget: frozenset[str]


def plan_watchers(nodes: Iterable[RayNode], running: Iterable[str], blocked: Iterable[str] = ()) -> WatchPlan:
    """Alive worker nodes without a watcher get one (unless ``blocked``); watchers of nodes that
    are dead or gone are forgotten."""
    wanted = {str(n["node_id"]) for n in nodes if n.get("state") == "ALIVE" and not n.get("is_head_node")}
    have = set(running)
    return WatchPlan(frozenset(wanted - have - set(blocked)), frozenset(have - wanted))


def gcs_nodes() -> list[dict[str, Any]]:
    """The nodes of the cluster this process is a driver of, from its GCS, state-API shaped."""
    import ray

    return [{"node_id": str(n["NodeID"]), "state": "ALIVE" if n.get("Alive") else "DEAD",
             "is_head_node": bool(n.get("IsHeadNode")) or HEAD_RESOURCE in (n.get("Resources") or {})}
            for n in ray.nodes()]


class NoticeInbox:
    """Holds the notices the node watchers report until the driver takes them."""

    def __init__(self) -> None:
        self.held: list[Notice] = []

    def notice(self, ray_node_id: str, seconds_left: float) -> None:
        """A watcher saw its node's notice."""
        self.held.append((ray_node_id, float(seconds_left)))

    def take(self) -> list[Notice]:
        """Every notice held, once."""
        out, self.held = self.held, []
        return out


class NodeWatchActor:
    """Watches the metadata server of the node it is pinned to; tells the inbox of a notice."""

    def __init__(self, ray_node_id: str) -> None:
        self.ray_node_id = ray_node_id
        self._watch: NoticeWatch | None = None

    def watch(self, cloud: str, inbox: Any, base_url: str | None = None) -> str:
        """Start polling ``cloud``'s metadata server; returns the Ray node id watched."""
        if self._watch is not None:
            return self.ray_node_id

        def on_notice(n: PreemptionNotice) -> None:
            inbox.notice.remote(self.ray_node_id, n.seconds_left)

        self._watch = NoticeWatch(watcher_for(cloud, base_url), on_notice).start()
        return self.ray_node_id

    def where(self) -> str:
        """The Ray node this actor runs on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def stop(self) -> None:
        """Stop polling."""
        if self._watch is not None:
            self._watch.stop()


NodeLister = Callable[[], list[dict[str, Any]]]


class ClusterNoticeWatch:
    """Keeps one :class:`NodeWatchActor` per alive worker node of this driver's cluster."""

    def __init__(self, cloud: str, base_url: str | None = None, *, every_s: float = WATCH_EVERY_S,
                 retry_s: float = RETRY_S, list_nodes: NodeLister | None = None) -> None:
        if cloud not in notice_clouds():
            raise InvalidInput("cloud", f"no metadata watcher for {cloud!r}",
                               fix=f"register the cluster with --cloud one of {', '.join(notice_clouds())}")
        import ray

        self.cloud, self.base_url, self.every_s, self.retry_s = cloud, base_url, every_s, retry_s
        self.list_nodes: NodeLister = list_nodes or gcs_nodes
        self.inbox: Any = ray.remote(num_cpus=0)(NoticeInbox).remote()
        self.watchers: dict[str, Any] = {}  # ray node id -> actor handle
        self.starting: dict[str, tuple[Any, Any]] = {}  # ray node id -> (handle, watch ref)
        self.failed: dict[str, float] = {}  # ray node id -> no retry before (monotonic)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="node-notice-watch", daemon=True)

    def start(self) -> ClusterNoticeWatch:
        """Begin re-checking the node list on a daemon thread."""
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile()
            except Exception:  # noqa: BLE001 - one bad pass (GCS hiccup) must not end the loop
                log.exception("node notice watch: reconcile failed")
            self._stop.wait(self.every_s)

    def reconcile(self) -> WatchPlan:
        """One pass: collect finished starts, start missing watchers, forget stale ones."""
        with self._lock:
            self._collect()
            now = time.monotonic()
            self.failed = {nid: at for nid, at in self.failed.items() if at > now}
            plan = plan_watchers(self.list_nodes(), [*self.watchers, *self.starting], self.failed)
            for node_id in sorted(plan.forget):
                self._forget(node_id)
            for node_id in sorted(plan.start):
                self._start(node_id)
            return plan

    def _start(self, node_id: str) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actor: Any = ray.remote(num_cpus=0, max_restarts=0)(NodeWatchActor).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)).remote(node_id)
        self.starting[node_id] = (actor, actor.watch.remote(self.cloud, self.inbox, self.base_url))

    def _collect(self) -> None:
        import ray

        for node_id, (actor, ref) in list(self.starting.items()):
            if not ray.wait([ref], timeout=0)[0]:
                continue
            del self.starting[node_id]
            try:
                ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - the node died while starting, or no watcher
                log.warning("notice watcher on %s did not start (retry in %.0f s): %s", node_id,
                            self.retry_s, str(exc).strip().splitlines()[-1:])
                self.failed[node_id] = time.monotonic() + self.retry_s
                _kill(actor)
                continue
            self.watchers[node_id] = actor
            log.info("notice watcher on %s watches %s metadata", node_id, self.cloud)

    def _forget(self, node_id: str) -> None:
        actor = self.watchers.pop(node_id, None) or (self.starting.pop(node_id, None) or (None,))[0]
        if actor is not None:
            _kill(actor)

    def take(self, timeout_s: float = 10.0) -> list[Notice]:
        """The notices reported since the last take."""
        import ray

        return list(ray.get(self.inbox.take.remote(), timeout=timeout_s))

    def watched(self) -> list[str]:
        """The Ray node ids whose watcher runs."""
        with self._lock:
            return sorted(self.watchers)

    def stop(self) -> None:
        """Stop re-checking and kill every watcher."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.every_s + 10)
        with self._lock:
            for node_id in [*self.watchers, *self.starting]:
                self._forget(node_id)


def _kill(actor: Any) -> None:
    import ray

    try:
        ray.kill(actor, no_restart=True)
    except Exception as exc:  # noqa: BLE001 - already gone is fine
        log.debug("kill notice watcher: %s", exc)
