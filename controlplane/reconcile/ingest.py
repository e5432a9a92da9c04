"""Step 1 of the reconcile loop: new submissions (``PENDING -> QUEUED``) and cancel flags."""

from __future__ import annotations

from controlplane.core.models import JobState
from controlplane.reconcile.nodeops import NodeOps
from controlplane.reconcile.recorder import Recorder
from controlplane.reconcile.state import LoopState
from controlplane.store import Store


class Ingest:
    """Reads the store's new jobs, tenants and cancel requests into the loop's state."""

    def __init__(self, store: Store, state: LoopState, rec: Recorder, ops: NodeOps) -> None:
        self.store, self.state, self.rec, self.ops = store, state, rec, ops

    def run(self, now: float) -> None:
        s = self.state
        jobs, bad = self.store.load_new_jobs(set(s.jobs))
        self.ops.quarantine_rows(bad, now)
        for job in jobs:
            s.jobs[job.id] = job
            if job.tenant_id not in s.tenants:
                self.load_tenants(now)
            self.rec.move(job, JobState.QUEUED, "accepted by the controller", now)
        for job_id in self.store.cancel_requests():
            found = s.jobs.get(job_id)
            if found is None or found.terminal:
                continue
            job = found
            job.cancel_requested = True
            if job.state in (JobState.RUNNING, JobState.CHECKPOINTING):
                self.rec.progress(job, now)
            self.rec.bill(job, now)  # after the progress: the counterfactual counts the last interval
            self.ops.release(job, now, "job cancelled", keep=False)
            job.finished_at = now
            self.rec.move(job, JobState.CANCELLED, "cancelled by the tenant", now)

    def load_tenants(self, now: float) -> None:
        """Every tenant from the store; a row that does not load is quarantined."""
        tenants, bad = self.store.load_tenants()
        self.state.tenants = {t.id: t for t in tenants}
        self.state.bad_tenants = {b.id for b in bad}
        self.ops.quarantine_rows(bad, now)
