"""spotplane's multi-zone policy that weighs the egress of a move between regions before it
moves (as SkyNomad does): a zone in another region than the job's checkpoint costs
``egress_usd(checkpoint, here -> there)`` once, spread over the zone's expected spot run and
shared by the gang's N nodes (zone prices are per node).

Score of a zone: ``p_z * (1 + d / E[run_z]) + egress(here -> z) / (N E[run_z])``; a running spot
job moves to z' only when ``E[run_z'] * (p_z - p_z') > d * (p_z' + p_z) + egress(here -> z') / N``;
an on-demand run starts where ``p_od_z + egress(here -> z) / (N (C - progress))`` is least.

Live, every zone's (cloud, region) comes with its :class:`~policies.deadline.ZoneView` and the
bytes a move carries with the :class:`~policies.deadline.Observation` (the job's last checkpoint
or its spec'd estimate); the benchmark's replay gives both to the constructor instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from policies.deadline import (
    EPS,
    Action,
    DeadlineTask,
    Kind,
    Observation,
    ZoneView,
    deadline_policy,
)
from policies.egress import GB, egress_usd
from policies.multizone import SpotplaneMultiZone


class EgressAwareSpotplane(SpotplaneMultiZone):
    """:class:`SpotplaneMultiZone` charged the egress of every move between regions."""

    name = "spotplane_egress"

    def __init__(self, task: DeadlineTask, *, places: Mapping[str, tuple[str, str]] | None = None,
                 checkpoint_gb: float = 0.0, **kw: Any) -> None:
        """``places``: zone -> (cloud, region); ``checkpoint_gb``: what one move carries (both
        also learnt from every observation that brings them)."""
        super().__init__(task, **kw)
        self.places = dict(places or {})
        self.nbytes = int(checkpoint_gb * GB)
        self._where: tuple[str, str] | None = None  # where the job's checkpoint was written last

    def egress(self, zone: str) -> float:
        """Dollars to bring the checkpoint to ``zone`` (0 before the job first ran)."""
        there = self.places.get(zone)
        if self._where is None or there is None:
            return 0.0
        return egress_usd(self.nbytes, *self._where, *there)

    def egress_per_node(self, zone: str) -> float:
        """The move's egress as one node's share: ``egress(zone) / N`` (zone prices are per node)."""
        return self.egress(zone) / self.task.nodes

    def _score(self, z: ZoneView) -> float:
        run = self.expected_run(z.zone)
        return super()._score(z) + self.egress_per_node(z.zone) / run

    def _keep_or_move(self, obs: Observation, avail: list[ZoneView]) -> Action:
        action = super()._keep_or_move(obs, avail)
        if action.zone is None or action.zone == obs.zone:
            return action
        here = next(z for z in obs.zones if z.zone == obs.zone)
        there = next(z for z in avail if z.zone == action.zone)
        saving = self.expected_run(there.zone) * (here.spot_price - there.spot_price)
        if saving > self._d * (there.spot_price + here.spot_price) + self.egress_per_node(there.zone):
            return action
        return Action(Kind.SPOT, obs.zone)

    def _learn(self, obs: Observation) -> None:
        """Every zone's (cloud, region) and the bytes a move carries, where ``obs`` brings them."""
        for z in obs.zones:
            if z.cloud and z.region:
                self.places[z.zone] = (z.cloud, z.region)
        if obs.checkpoint_bytes is not None:
            self.nbytes = int(obs.checkpoint_bytes)

    def on_demand_zone(self, obs: Observation) -> str:
        """Where an on-demand run starts: ``min_z p_od_z + egress(here -> z) / (N * (C - progress))``
        (the egress spread over the compute left, one node's share)."""
        left = max(self.task.compute_hours - obs.progress_hours, self.tick_hours, EPS)
        return min(obs.zones, key=lambda z: (z.on_demand_price + self.egress_per_node(z.zone) / left,
                                             z.zone)).zone

    def decide(self, obs: Observation) -> Action:
        self._learn(obs)
        if obs.state is not Kind.IDLE and obs.zone is not None and obs.zone in self.places:
            self._where = self.places[obs.zone]
        action = super().decide(obs)
        if action.kind is Kind.ON_DEMAND and obs.state is not Kind.ON_DEMAND and obs.zones:
            return replace(action, zone=self.on_demand_zone(obs))
        return action

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "where": None if self._where is None else list(self._where)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        where = state.get("where")
        self._where = None if where is None else (str(where[0]), str(where[1]))


@deadline_policy("spotplane_egress", live=True, ticked=True)
def _make_spotplane_egress(task: DeadlineTask, **kw: Any) -> EgressAwareSpotplane:
    return EgressAwareSpotplane(task, **kw)


def places_of(zones: Sequence[str], clouds: Sequence[str], regions: Sequence[str]) -> dict[str, tuple[str, str]]:
    """zone -> (cloud, region), from three parallel lists."""
    return {z: (c, r) for z, c, r in zip(zones, clouds, regions, strict=True)}
