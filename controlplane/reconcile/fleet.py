"""Step 2 of the reconcile loop: fold the fleet's state and events into nodes.

One ``describe()`` and one ``poll_events()`` per tick; node agents' notices
(:meth:`SyncFleet.external_notice`) and the nodes' own reports through the API (a notice, a
failed boot: ``Store.take_node_reports``) are folded in first.
"""

from __future__ import annotations

import logging

from clusters.fleet import FleetProvider, Instance, InstanceState
from controlplane.core import counters
from controlplane.core.errors import CloudError, InvalidInput
from controlplane.core.models import Market, Node, NodeState
from controlplane.core.readmodels import ZoneInfo
from controlplane.reconcile.contracts import ZONE_OBSERVATIONS, ControllerSettings
from controlplane.reconcile.nodeops import NodeOps
from controlplane.reconcile.recorder import Recorder
from controlplane.reconcile.state import UP_STATES, LoopState
from controlplane.store import Store

_NODE_OF_INSTANCE = {
    InstanceState.PENDING: NodeState.PROVISIONING,
    InstanceState.RUNNING: NodeState.READY,
    InstanceState.NOTICED: NodeState.NOTICED,
    InstanceState.PREEMPTED: NodeState.PREEMPTED,
    InstanceState.TERMINATED: NodeState.TERMINATED,
}


log = logging.getLogger(__name__)

NOTICE_REPORT = "notice"  # a node's watcher saw the metadata server's preemption notice
BOOT_FAILED_REPORT = "boot_failed"  # a node's bootstrap failed (it sends its log's last lines)
TAIL_LINES = 12


def boot_failure_cause(instance_id: str, body: dict[str, object]) -> str:
    """The failed node's event: the reason and the last lines of its bootstrap's log."""
    lines = str(body.get("log_tail", "")).strip().splitlines()[-TAIL_LINES:]
    tail = "\n".join(line[:300] for line in lines)
    return f"{body.get('reason', 'bootstrap failed')} on {instance_id}" + (f":\n{tail}" if tail else "")


class SyncFleet:
    """Ready, noticed, preempted and terminated instances become node states."""

    def __init__(self, fleet: FleetProvider, store: Store, settings: ControllerSettings,
                 state: LoopState, rec: Recorder, ops: NodeOps | None = None) -> None:
        if settings.zone_observation not in ZONE_OBSERVATIONS:
            raise InvalidInput("zone_observation", f"unknown mode {settings.zone_observation!r}",
                               fix=f"use one of {', '.join(ZONE_OBSERVATIONS)}")
        if settings.probe_minutes < 0:
            raise InvalidInput("probe_minutes", f"must be >= 0, got {settings.probe_minutes}")
        self.fleet, self.store, self.settings = fleet, store, settings
        self.state, self.rec, self.ops = state, rec, ops
        self.evidence_only = settings.zone_observation == "evidence"

    def external_notice(self, instance_id: str, seconds_left: float) -> None:
        """A node agent (NodeActor watching the metadata server) saw a preemption notice; it
        is folded in at the next tick, before the fleet's own event may arrive."""
        self.state.fleet.external[instance_id] = float(seconds_left)

    def run(self, now: float) -> None:
        s = self.state
        if s.ticks and s.ticks % self.settings.catalog_every_ticks == 0:
            self._read_catalog()
        self._take_node_reports(now)
        self._fold_external(now)
        s.fleet.closed = self.fleet.closed_zones()
        insts = self.fleet.describe()
        events = self.fleet.poll_events()
        when: dict[tuple[str, str], float] = {}
        for e in events:
            when[(e.instance_id, e.kind.value)] = e.at
            if e.seconds_left is not None:
                node_id = s.by_instance.get(e.instance_id)
                if node_id is not None:
                    s.work.notices[node_id] = e.seconds_left
        if not self.evidence_only:
            self._observe_every_zone()
        for inst in insts:
            node_id = s.by_instance.get(inst.instance_id)
            node = s.nodes.get(node_id) if node_id is not None else None
            if node is not None:
                self._fold(node, inst, when, now)
        if self.evidence_only:
            self._buy_probes()
            s.fleet.availability = {o.zone: s.fleet.evidence.get(o.zone, True) for o in s.offers}
        if s.ticks % self.settings.zones_every_ticks == 0:
            self.store.put_zones([
                ZoneInfo(cloud=o.cloud, zone=o.zone, region=o.region,
                         instance_type=o.instance_type, accelerator=o.accelerator,
                         accelerator_count=o.accelerator_count, spot_price=o.spot_price,
                         on_demand_price=o.on_demand_price,
                         spot_available=s.fleet.availability.get(o.zone, False), updated_at=now)
                for o in s.offers])

    def _read_catalog(self) -> None:
        """The fleet's offers again; a change replaces the loop's and empties the offers cached
        by job shape. A fleet that does not answer keeps the catalog it had."""
        s = self.state
        try:
            offers = self.fleet.offers()
        except CloudError as exc:
            log.warning("reading the fleet's offers: %s (the last catalog stands)", exc)
            return
        if offers != s.offers:
            s.offers = offers
            s.caches.offers.clear()

    def _observe_every_zone(self) -> None:
        s = self.state
        avail = self.fleet.spot_availability()
        if avail is not None:
            s.fleet.availability = avail
        elif not s.fleet.availability or s.ticks % self.settings.zones_every_ticks == 0:
            # a real cloud's probe is an API call per zone and type: every few ticks, not every
            # tick; a zone is up when any of its instance types has spot (the first that does)
            up: dict[str, bool] = {}
            for o in s.offers:
                if not up.get(o.zone, False):
                    up[o.zone] = self.fleet.spot_available(o.zone, o.instance_type)
            s.fleet.availability = up

    def _buy_probes(self) -> None:
        """The probes policies asked for at the last tick: one provider probe per zone, of its
        cheapest spot offer, billed ``probe_minutes`` of that node."""
        s, w = self.state, self.state.work
        wanted, s.fleet.probes = sorted(s.fleet.probes), set()
        for zone in wanted:
            offer = min((o for o in s.offers if o.zone == zone), key=lambda o: o.spot_price,
                        default=None)
            if offer is None:
                continue
            try:
                s.fleet.evidence[zone] = bool(self.fleet.spot_available(zone, offer.instance_type))
            except CloudError as exc:  # no answer is no evidence: the belief stands
                log.warning("probing spot in %s: %s", zone, exc)
                continue
            counters.count(w.counters, "zone_probes_total", provider=self.fleet.name, zone=zone)
            counters.count(w.counters, "zone_probe_cost_dollars_total",
                           offer.spot_price * self.settings.probe_minutes / 60.0,
                           provider=self.fleet.name)

    def _take_node_reports(self, now: float) -> None:
        """Notices become agents' notices; a failed boot fails its node (``NodeOps.fail_boot``)."""
        for kind, iid, body in self.store.take_node_reports():
            if kind == NOTICE_REPORT:
                self.external_notice(iid, float(body.get("seconds_left", 0.0)))
            elif kind == BOOT_FAILED_REPORT and self.ops is not None:
                node = self.state.nodes.get(self.state.by_instance.get(iid, ""))
                if node is not None:
                    self.ops.fail_boot(node, now, boot_failure_cause(iid, body))

    def _fold_external(self, now: float) -> None:
        s = self.state
        external, s.fleet.external = s.fleet.external, {}
        for iid, left in external.items():
            node = s.nodes.get(s.by_instance.get(iid, ""))
            if node is None or node.state not in UP_STATES:
                continue
            s.work.notices[node.id] = left
            if node.state is NodeState.READY:
                node.state, node.notice_at = NodeState.NOTICED, now
                self.rec.node_event(node, f"node agent: preemption notice, {left:.0f} s left", now)

    def _fold(self, node: Node, inst: Instance, when: dict[tuple[str, str], float],
              now: float) -> None:
        w = self.state.work
        new = _NODE_OF_INSTANCE[inst.state]
        old = node.state
        if new is old or old is NodeState.FAILED or (old is NodeState.TERMINATING and new not in (
                NodeState.TERMINATED, NodeState.PREEMPTED)):
            return
        if old is NodeState.NOTICED and new is NodeState.READY:
            return
        iid = inst.instance_id
        node.state = new
        at = when.get((iid, {NodeState.READY: "ready", NodeState.NOTICED: "preemption_notice",
                             NodeState.PREEMPTED: "preempted",
                             NodeState.TERMINATED: "terminated"}.get(new, "")), now)
        if node.market is Market.SPOT and new in (NodeState.READY, NodeState.PREEMPTED):
            self.state.fleet.evidence[node.zone] = new is NodeState.READY  # seen where it runs
        if new is NodeState.READY:
            node.ready_at = when.get((iid, "ready"), now)
            if node.job_id is None:
                node.idle_since = node.ready_at
        elif new is NodeState.NOTICED:
            node.ready_at = node.ready_at or when.get((iid, "ready"), now)
            node.notice_at = when.get((iid, "preemption_notice"), now)
            w.notices.setdefault(node.id, 30.0)
        elif new is NodeState.PREEMPTED:
            node.ended_at = at
            node.notice_at = node.notice_at or when.get((iid, "preemption_notice"))
            self.state.fleet.zone_preemptions.setdefault(node.zone, []).append(node.ended_at)
            w.count("nodes_preempted_total")
            counters.count(w.counters, "node_preemptions_total", cloud=node.cloud,
                          zone=node.zone, market=node.market.value)
        elif new is NodeState.TERMINATED:
            node.ended_at = node.ended_at or when.get((iid, "terminated"), now)
        self.rec.node_event(node, f"fleet: instance {iid} is {inst.state.value}", at)
