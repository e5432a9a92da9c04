"""What every phase records with: the tick's journal, billing and simulated progress, together.

A :class:`Recorder` hands each phase the three (``controlplane.reconcile.journal``,
``.billing``, ``.progress``) under the verbs the phases use: ``move``, ``node_event``,
``decide``, ``bill`` and ``progress``.
"""

from __future__ import annotations

from clusters.fleet import FleetProvider
from controlplane.reconcile.billing import Billing
from controlplane.reconcile.contracts import JobExecutor
from controlplane.reconcile.journal import Journal
from controlplane.reconcile.progress import AGE_BUCKET_HOURS, SimulatedProgress
from controlplane.reconcile.state import LoopState

__all__ = ["AGE_BUCKET_HOURS", "Recorder"]


class Recorder:
    """The journal, billing and simulated progress of one loop."""

    def __init__(self, state: LoopState, fleet: FleetProvider,
                 executor: JobExecutor | None) -> None:
        self.state = state
        self.journal = Journal(state)
        self.billing = Billing(state)
        self.simulated = SimulatedProgress(state, fleet, executor, self.journal.move)
        self.move, self.node_event, self.decide = (self.journal.move, self.journal.node_event,
                                                   self.journal.decide)
        self.bill, self.progress = self.billing.bill, self.simulated
