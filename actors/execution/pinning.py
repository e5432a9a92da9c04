"""Pinning and gangs: which Ray resource holds a node's replica (``spotplane_node:<id>``, else a
``spotplane_slot:<i>`` bound to the node while it lives, else none), the GPUs an entrypoint asks
for, and a gang's placement group of one bundle per worker."""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Sequence

from actors.actorbridge import Actors
from actors.execution.replicas import Replica
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


class Pinning:
    """Pins replicas to their nodes on the workload Ray (``pin``: auto or never) and asks for
    their GPUs (``gpus``: auto, always or never)."""

    def __init__(self, actors: Actors, pin: str, gpus: str) -> None:
        self.actors = actors
        self.pin = pin
        self.gpus = gpus
        self.slots: SlotMap | None = None

    def resource_for(self, node_id: str, instance_id: str | None = None) -> str | None:
        """The node's pin: its own resource (by node id, else by the instance id its bootstrap
        declares), else its slot (bound now if free), else None."""
        if self.pin == "never":
            return None
        have = self.actors.resources()
        for own in (node_id, instance_id):
            exact = f"{NODE_PREFIX}{own}"
            if own and exact in have:
                return exact
        slots = [k for k in have if is_slot(k)]
        if self.slots is None:
            self.slots = SlotMap(sorted(slots, key=slot_index))
        else:
            self.slots.learn(slots)
        slot = self.slots.slot_for(node_id, have)
        if slot is None:
            log.info(
                "no %s<id> or free %s<i> resource in this Ray: replica on node %s is not pinned",
                NODE_PREFIX,
                SLOT_PREFIX,
                node_id,
            )
        return slot

    def bound_pin(self, node_id: str) -> str | None:
        """The pin the node holds now: its slot, else its own resource."""
        exact = f"{NODE_PREFIX}{node_id}"
        if self.slots is None:
            return exact
        return self.slots.bound.get(node_id, exact)

    def nodes_present(self, rep: Replica) -> bool:
        """Whether the Ray nodes the replica is pinned to (its own and its gang's) are alive."""
        have = self.actors.resources()
        pins = [rep.resource, *(self.bound_pin(n) for n in rep.group_nodes)]
        return all(p in have for p in pins if p is not None)

    def num_gpus(self, wanted: int) -> int:
        """GPUs the entrypoint asks Ray for: ``always`` the job's, ``never`` none, ``auto`` the
        job's when the workload Ray has GPUs (a real GPU node), none on a GPU-less Ray (the
        simulated fleet's local Ray, where the nodes' accelerators are only modelled)."""
        if wanted <= 0 or self.gpus == "never":
            return 0
        if self.gpus == "always":
            return wanted
        return wanted if float(self.actors.resources().get("GPU", 0.0)) > 0 else 0

    def place_gang(self, name: str, node_ids: Sequence[str], gpus: int,
                   first_pin: str | None, timeout_s: float) -> None:
        """Create the gang's placement group: bundle i holds ``gpus`` GPUs and node i's pin."""
        bundles: list[dict[str, float]] = []
        for i, nid in enumerate(node_ids):
            pin = first_pin if i == 0 else self.resource_for(nid)
            bundle: dict[str, float] = {"GPU": float(gpus)} if gpus else {}
            if pin is not None:
                bundle[pin] = PIN_AMOUNT
            bundles.append(bundle or {"CPU": 0.001})
        placed = self.actors.create_group(name, bundles, "STRICT_SPREAD", timeout_s)
        log.info("gang %s placed on Ray nodes %s", name, placed)

    def free_slots(self, node_ids: Sequence[str]) -> None:
        """The nodes' slots become free for other nodes."""
        if self.slots is not None:
            for nid in node_ids:
                self.slots.release(nid)

    def release(self, rep: Replica) -> None:
        """Give back what the replica held: its gang's placement group and its nodes' slots;
        once, since by a later call its nodes may be bound again for another job's replica."""
        if rep.released:
            return
        rep.released = True
        if rep.group is not None:
            try:
                self.actors.remove_group(rep.group)
            except Exception as e:  # noqa: BLE001 - gone with the cluster: nothing to free
                log.warning("removing placement group %s: %s", rep.group, e)
        self.free_slots([rep.node_id, *rep.group_nodes])
