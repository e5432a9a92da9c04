"""State shared by the reconcile-loop mixins of :class:`controlplane.controller.Controller`.

:class:`ReconcileState` declares the attributes ``Controller.__init__`` sets and (for the type
checker only) the methods one section calls in another, so each ``reconcile_*`` module reads
and type-checks on its own. :class:`TickWork` is what one tick accumulates before it persists.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clusters.fleet import FleetProvider, LaunchRequest, Offer
from controlplane.clock import Clock
from controlplane.models import Decision, Event, Job, JobState, Market, Node, NodeState, Tenant
from controlplane.policyhost import DeadlinePolicyHost
from controlplane.store import BadRow, Intent, Store

if TYPE_CHECKING:
    from controlplane.controller import ControllerSettings, JobExecutor, QuotaSource, TickReport

UP_STATES = frozenset({NodeState.READY, NodeState.NOTICED})
WITH_NODES = frozenset({JobState.STARTING, JobState.RUNNING, JobState.CHECKPOINTING})


@dataclass
class TickWork:
    """What one tick accumulates before it persists."""

    events: list[Event] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    jobs: dict[str, Job] = field(default_factory=dict)  # changed state: persisted this tick
    progress: dict[str, Job] = field(default_factory=dict)  # only progress/cost moved
    nodes: dict[str, Node] = field(default_factory=dict)
    intents: list[Intent] = field(default_factory=list)
    launches: list[tuple[Intent, LaunchRequest, list[str]]] = field(default_factory=list)
    terminations: list[tuple[Intent, list[str]]] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=dict)
    notices: dict[str, float] = field(default_factory=dict)  # node id -> seconds left
    quarantine: list[BadRow] = field(default_factory=list)  # rows set aside this tick
    report: TickReport | None = None

    def count(self, name: str, by: float = 1.0) -> None:
        self.counters[name] = self.counters.get(name, 0.0) + by


class ReconcileState:
    """What every section of the reconcile loop reads and writes (set by ``Controller``)."""

    store: Store
    fleet: FleetProvider
    clock: Clock
    epoch: int | None
    settings: ControllerSettings
    policy_host: DeadlinePolicyHost
    executor: JobExecutor | None
    quota: QuotaSource
    scheduler: Any
    jobs: dict[str, Job]
    nodes: dict[str, Node]
    by_instance: dict[str, str]
    tenants: dict[str, Tenant]
    offers: list[Offer]
    _offer_cache: dict[tuple[str | None, int], list[Offer]]
    availability: dict[str, bool]
    zone_preemptions: dict[str, list[float]]
    refused: dict[str, float]
    ticks: int
    _quota_cache: dict[str, float | None]
    _recovered: bool
    _w: TickWork
    after_barrier: Callable[[int], None] | None
    _external: dict[str, float]
    _quarantined: set[tuple[str, str]]  # (table, id) of every row quarantined by this process
    _bad_tenants: set[str]  # tenants whose row does not load: their jobs are not placed
    _demand: dict[str, tuple[float, float]]  # set by _account_demand, read by _persist

    if TYPE_CHECKING:
        # recording helpers (controller.py)
        def _move(self, job: Job, dst: JobState, cause: str, at: float) -> None: ...

        def _node_event(self, node: Node, cause: str, at: float) -> None: ...

        def _decide(self, job: Job, policy: str, action: str, reason: str, at: float,
                    zone: str | None = None, obs: dict[str, Any] | None = None) -> None: ...

        def _quarantine_job(self, job: Job, now: float, reason: str) -> None: ...

        # jobs (reconcile_jobs.py)
        def _progress(self, job: Job, until: float) -> None: ...

        def _bill(self, job: Job, until: float) -> None: ...

        def _offers_for(self, job: Job) -> list[Offer]: ...

        def _preempt(self, job: Job, now: float, lost: Sequence[Node],
                     cause: str = "") -> None: ...

        def _release(self, job: Job, now: float, cause: str, *, keep: bool) -> None: ...

        # placement (reconcile_placement.py)
        def _zones(self, job: Job, market: Market, now: float) -> list[Offer]: ...

        def _launch(self, job: Job, offer: Offer, market: Market, count: int,
                    now: float) -> list[Node]: ...

        def _terminate(self, node: Node, now: float, cause: str) -> None: ...
