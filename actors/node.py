"""NodeActor: health and preemption notices of one GPU node.

On a real Ray cluster the actor is pinned to its node with ``NodeAffinitySchedulingStrategy``
(:func:`node_actor_options`), so it dies with the node and can watch the node's metadata server
(``clusters/notices.py``). On the simulated fleet there is no Ray node per instance;
the controller folds the fleet's events itself and NodeActors are optional.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import ray
from ray.actor import ActorHandle

from clusters.notices import NoticeWatch, PreemptionNotice
from clusters.providers import instance_identity, watcher_for
from controlplane.core.clock import Clock, WallClock

if TYPE_CHECKING:
    from clusters.notices import NoticeWatch


class NodeActor:
    def __init__(self, node_id: str, instance_id: str, clock: Clock | None = None) -> None:
        self.node_id, self.instance_id = node_id, instance_id
        self.clock = clock or WallClock()
        self.started_at = self.clock.now()
        self.last_beat = self.started_at
        self.notices: list[dict[str, Any]] = []
        self._watch: NoticeWatch | None = None

    def heartbeat(self) -> float:
        self.last_beat = self.clock.now()
        return self.last_beat

    def notice(self, seconds_left: float, source: str = "fleet") -> None:
        """Record a preemption notice (from the fleet or the metadata server)."""
        self.notices.append({"at": self.clock.now(), "seconds_left": float(seconds_left),
                             "source": source})

    def health(self) -> dict[str, Any]:
        now = self.clock.now()
        return {"node_id": self.node_id, "instance_id": self.instance_id,
                "age_s": now - self.started_at, "since_heartbeat_s": now - self.last_beat,
                "noticed": bool(self.notices), "notices": list(self.notices)}

    def watch_metadata(self, cloud: str, listeners: Sequence[tuple[Any, str]] = (),
                       base_url: str | None = None) -> str:
        """Watch this node's metadata server (``clusters.notices``); on a notice record it and
        call ``listener.<method>(instance_id, seconds_left)`` at once (``.remote`` on actors).

        An actor made with an empty ``instance_id`` first asks the metadata server for it (the
        EC2 instance id or GCE VM name, what the fleet provider calls the instance). Returns it.
        """

        if not self.instance_id:
            self.instance_id = instance_identity(cloud, base_url)
        self.stop_watching()

        def on_notice(n: PreemptionNotice) -> None:
            self.notice(n.seconds_left, source=f"{n.cloud}-metadata")
            for handle, method in listeners:
                fn = getattr(handle, method)  # the listener's method named in ``listeners``
                if isinstance(handle, ActorHandle):
                    fn.remote(self.instance_id, n.seconds_left)
                else:
                    fn(self.instance_id, n.seconds_left)

        self._watch = NoticeWatch(watcher_for(cloud, base_url, self.clock), on_notice).start()
        return self.instance_id

    def stop_watching(self) -> None:
        if self._watch is not None:
            self._watch.stop()

    def ray_node_id(self) -> str:
        return str(ray.get_runtime_context().get_node_id())


RemoteNodeActor = ray.remote(num_cpus=0, max_restarts=0)(NodeActor)


def node_actor_options(ray_node_id: str | None, name: str, namespace: str) -> dict[str, Any]:
    """Actor options: pinned (hard affinity) to ``ray_node_id`` when the node is a Ray node."""
    opts: dict[str, Any] = {"name": name, "namespace": namespace, "get_if_exists": True}
    if ray_node_id is not None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=ray_node_id, soft=False)
    return opts
