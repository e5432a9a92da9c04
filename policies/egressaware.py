"""spotplane's multi-zone policy that weighs the egress of a move between regions before it
moves (as SkyNomad does): a zone in another region than the job's checkpoint costs
``egress_usd(checkpoint, here -> there)`` once, spread over the zone's expected spot run.

Score of a zone: ``p_z * (1 + d / E[run_z]) + egress(here -> z) / E[run_z]``; a running spot job
moves to z' only when ``E[run_z'] * (p_z - p_z') > d * (p_z' + p_z) + egress(here -> z')``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from policies.deadline import Action, DeadlineTask, Kind, Observation, ZoneView
from policies.egress import GB, egress_usd
from policies.multizone import SpotplaneMultiZone


class EgressAwareSpotplane(SpotplaneMultiZone):
    """:class:`SpotplaneMultiZone` charged the egress of every move between regions."""

    name = "spotplane_egress"

    def __init__(self, task: DeadlineTask, *, places: Mapping[str, tuple[str, str]],
                 checkpoint_gb: float, **kw: Any) -> None:
        """``places``: zone -> (cloud, region); ``checkpoint_gb``: what one move carries."""
        super().__init__(task, **kw)
        self.places = dict(places)
        self.nbytes = int(checkpoint_gb * GB)
        self._where: tuple[str, str] | None = None  # where the job's checkpoint was written last

    def egress(self, zone: str) -> float:
        """Dollars to bring the checkpoint to ``zone`` (0 before the job first ran)."""
        there = self.places.get(zone)
        if self._where is None or there is None:
            return 0.0
        return egress_usd(self.nbytes, *self._where, *there)

    def _score(self, z: ZoneView) -> float:
        run = self.expected_run(z.zone)
        return super()._score(z) + self.egress(z.zone) / run

    def _keep_or_move(self, obs: Observation, avail: list[ZoneView]) -> Action:
        action = super()._keep_or_move(obs, avail)
        if action.zone is None or action.zone == obs.zone:
            return action
        here = next(z for z in obs.zones if z.zone == obs.zone)
        there = next(z for z in avail if z.zone == action.zone)
        saving = self.expected_run(there.zone) * (here.spot_price - there.spot_price)
        if saving > self._d * (there.spot_price + here.spot_price) + self.egress(there.zone):
            return action
        return Action(Kind.SPOT, obs.zone)

    def decide(self, obs: Observation) -> Action:
        if obs.state is not Kind.IDLE and obs.zone is not None and obs.zone in self.places:
            self._where = self.places[obs.zone]
        return super().decide(obs)


def places_of(zones: Sequence[str], clouds: Sequence[str], regions: Sequence[str]) -> dict[str, tuple[str, str]]:
    """zone -> (cloud, region), from three parallel lists."""
    return {z: (c, r) for z, c, r in zip(zones, clouds, regions, strict=True)}
