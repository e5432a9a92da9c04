"""Cloud state to events, shared by the polled clouds (AWS, GCP): each poll's instance states
against the last poll's, as READY, PREEMPTED, TERMINATED or LAUNCH_FAILED events."""

from __future__ import annotations

from collections.abc import Sequence

from clusters.fleet import EventKind, FleetEvent, InstanceState

FINAL_STATES = frozenset({InstanceState.PREEMPTED, InstanceState.TERMINATED})
STARTING_STATES = (None, InstanceState.PENDING)


class StateDiffer:
    """Cloud state to events: each instance's state against the one seen at the last poll."""

    def __init__(self) -> None:
        self.last: dict[str, InstanceState] = {}
        self.ours_ended: set[str] = set()  # instances we terminated ourselves

    def ended_by_us(self, instance_ids: Sequence[str]) -> None:
        """Remember that we terminated these (their end is no failed launch)."""
        self.ours_ended.update(instance_ids)

    def known(self) -> set[str]:
        """Every instance seen at some poll."""
        return set(self.last)

    def events(self, instance_id: str, zone: str, state: InstanceState, now: float, *,
               detail: str = "", may_have_failed: bool = False) -> list[FleetEvent]:
        """The event of ``instance_id`` reaching ``state`` (none when nothing changed or it had
        ended); an instance that ends while starting, not by us, is a failed launch when the
        cloud says why (``may_have_failed``)."""
        before = self.last.get(instance_id)
        self.last[instance_id] = state
        if state == before or before in FINAL_STATES:
            return []
        if state in (InstanceState.RUNNING, InstanceState.NOTICED) and before in STARTING_STATES:
            return [FleetEvent(EventKind.READY, instance_id, zone, now)]
        if state == InstanceState.PREEMPTED:
            return [FleetEvent(EventKind.PREEMPTED, instance_id, zone, now, detail=detail)]
        if state == InstanceState.TERMINATED:
            failed = (may_have_failed and instance_id not in self.ours_ended
                      and before in STARTING_STATES)
            kind = EventKind.LAUNCH_FAILED if failed else EventKind.TERMINATED
            return [FleetEvent(kind, instance_id, zone, now, detail=detail)]
        return []
