"""A job's replicas on Ray: their states, the Ray job status each maps from, and the
``spotplane_slot`` resources that bind simulated nodes to a local Ray's capacity."""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from controlplane.core.errors import InvalidInput

log = logging.getLogger(__name__)


SLOT_PREFIX = "spotplane_slot:"
NODE_PREFIX = "spotplane_node:"
PIN_AMOUNT = 0.001



def slot_resources(n: int) -> dict[str, float]:
    """Custom resources for ``ray.init(resources=...)``: one slot per simulated node that may run."""
    if n < 0:
        raise InvalidInput("n", f"must be >= 0, got {n}")
    return {f"{SLOT_PREFIX}{i}": 1.0 for i in range(n)}


class ReplicaState(StrEnum):
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"


RAY_STATUS = {
    "PENDING": ReplicaState.STARTING,
    "RUNNING": ReplicaState.RUNNING,
    "SUCCEEDED": ReplicaState.SUCCEEDED,
    "FAILED": ReplicaState.FAILED,
    "STOPPED": ReplicaState.STOPPED,
}


@dataclass
class Replica:
    """One run of one replica of a job on one node (a Ray job + a checkpoint actor)."""

    job_id: str
    replica_id: str
    node_id: str
    attempt: int
    submission_id: str
    actor_name: str
    resource: str | None
    started_at: float
    work_hours: float
    state: ReplicaState = ReplicaState.STARTING
    stopped_reason: str | None = None
    outcome: dict[str, Any] | None = None  # EmergencyOutcome of a preemption
    last_status: dict[str, Any] = field(default_factory=dict)
    group: str | None = None  # a gang's placement group (named), removed when it stops
    group_nodes: list[str] = field(default_factory=list)  # the gang's other nodes
    ray_message: str = ""  # what Ray said of the job's end (e.g. its node died)
    released: bool = False  # its group and slots given back (once: a node may serve a new job)


class SlotMap:
    """Binds node ids to free ``spotplane_slot:<i>`` resources for as long as the node lives."""

    def __init__(self, slots: Sequence[str]) -> None:
        self.free = list(slots)
        self.bound: dict[str, str] = {}
        self._lock = threading.Lock()

    def slot_for(self, node_id: str, present: Collection[str] | None = None) -> str | None:
        """The node's slot, binding the first free one that the cluster still has
        (``present``: its resources; a slot whose raylet is gone is never bound)."""
        with self._lock:
            if node_id not in self.bound:
                usable = [s for s in self.free if present is None or s in present]
                if not usable:
                    return None
                self.free.remove(usable[0])
                self.bound[node_id] = usable[0]
            return self.bound[node_id]

    def learn(self, slots: Collection[str]) -> None:
        """Slots of raylets that joined since (a workload cluster that grows) become free."""
        with self._lock:
            known = set(self.free) | set(self.bound.values())
            self.free.extend(sorted((s for s in slots if s not in known), key=slot_index))

    def release(self, node_id: str) -> None:
        with self._lock:
            slot = self.bound.pop(node_id, None)
            if slot is not None:
                self.free.append(slot)


def is_slot(resource: str) -> bool:
    """``spotplane_slot:<i>`` itself; not the ``..._group_<i>_<pg id>`` resources Ray derives
    from it for a placement group's bundles."""
    return resource.startswith(SLOT_PREFIX) and resource[len(SLOT_PREFIX):].isdigit()


def slot_index(name: str) -> int:
    """A slot's number, for ordering (a name that is not a slot sorts last)."""
    tail = name[len(SLOT_PREFIX) :]
    return int(tail) if tail.isdigit() else 10**9
