"""Step 1 of the reconcile loop: new submissions (``PENDING -> QUEUED``) and cancel flags.

Admission is bounded: per tick at most ``ingest_batch`` stored jobs enter the in-memory queues,
shared among the tenants that have room (each holds at most ``queued_per_tenant`` queued jobs in
memory, all of them at most ``queued_total``, but a tenant with none always gets its oldest).
A tenant's queued jobs a restart left in the store (``LoopState.parked``) are re-read first,
then its new submissions, oldest first; the rest stay in the store for later ticks.
"""

from __future__ import annotations

from collections import Counter

from controlplane.core.models import Job, JobState
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.nodeops import NodeOps
from controlplane.reconcile.recorder import Recorder
from controlplane.reconcile.state import LoopState
from controlplane.store import BadRow, Store

Row = tuple[int, Job | BadRow]


class Ingest:
    """Reads the store's new jobs, tenants and cancel requests into the loop's state."""

    def __init__(self, store: Store, state: LoopState, rec: Recorder, ops: NodeOps,
                 settings: ControllerSettings | None = None) -> None:
        self.store, self.state, self.rec, self.ops = store, state, rec, ops
        self.settings = settings or ControllerSettings()

    def run(self, now: float) -> None:
        self._take(self.admit(), now)
        self._cancel(now)

    def readmit(self, now: float) -> None:
        """At recovery: the first batch of the queued jobs a restart left in the store."""
        self._take(self.admit(pending=False), now)

    def _take(self, found: list[Row], now: float) -> None:
        s = self.state
        rows = sorted(found, key=lambda r: r[0])  # the submission order, across tenants
        self.ops.quarantine_rows([f for _, f in rows if isinstance(f, BadRow)], now)
        for _, job in rows:
            if isinstance(job, BadRow):
                continue
            s.jobs[job.id] = job
            if job.tenant_id not in s.tenants:
                self.load_tenants(now)
            if job.state is JobState.PENDING:
                self.rec.move(job, JobState.QUEUED, "accepted by the controller", now)

    def _cancel(self, now: float) -> None:
        s = self.state
        asked = sorted(self.store.cancel_requests())
        waiting = [i for i in asked if i not in s.jobs][: max(1, self.settings.ingest_batch)]
        if waiting:  # still in the store's backlog: cancelled now, not when their turn comes
            backlog, bad = self.store.load_waiting_jobs(waiting)
            self.ops.quarantine_rows(bad, now)
            for waiter in backlog:
                s.jobs[waiter.id] = waiter
        for job_id in asked:
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

    def admit(self, *, pending: bool = True) -> list[Row]:
        """This tick's stored jobs for the in-memory queues. First every tenant with none
        queued in memory gets its oldest (so no backlog keeps a tenant out); then rounds in
        which each tenant with room and more to give gets an equal share of what is left of
        ``ingest_batch`` and of ``queued_total``. A tenant's parked queued jobs come before its
        new submissions, oldest first."""
        s, cfg = self.state, self.settings
        if not s.parked and not (pending and self.store.has_pending()):
            return []  # nothing waits in the store: no query per tenant
        queued = Counter(j.tenant_id for j in s.jobs.values() if j.state is JobState.QUEUED)
        room = {t: cfg.queued_per_tenant - queued[t] for t in self.store.tenant_ids()}
        after: dict[str, int] = {}  # tenant -> seq of its last PENDING row read this tick
        cursor = after if pending else None
        out: list[Row] = []
        hungry = []
        for tenant, r in room.items():
            if r <= 0:
                continue
            if queued[tenant] == 0 and len(out) < cfg.ingest_batch:
                got, full = self._tenant_rows(tenant, 1, cursor)
                room[tenant] -= len(got)
                out += got
                if not full or room[tenant] <= 0:
                    continue
            hungry.append(tenant)
        budget = min(cfg.ingest_batch, cfg.queued_total - sum(queued.values())) - len(out)
        while budget > 0 and hungry:
            more = []
            for i, tenant in enumerate(hungry):
                want = min(-(-budget // (len(hungry) - i)), room[tenant])  # ceil of an even split
                got, full = self._tenant_rows(tenant, want, cursor)
                budget -= len(got)
                room[tenant] -= len(got)
                out += got
                if full and room[tenant] > 0:
                    more.append(tenant)
            hungry = more
        return out

    def _tenant_rows(self, tenant: str, want: int,
                     after: dict[str, int] | None) -> tuple[list[Row], bool]:
        """Up to ``want`` of one tenant's stored jobs not in memory, parked before pending (none
        when ``after`` is None), and whether it may have more."""
        s = self.state
        out: list[Row] = []
        if want > 0 and tenant in s.parked:
            rows = self.store.tenant_jobs_after(tenant, JobState.QUEUED, s.parked[tenant], want)
            if len(rows) < want:
                del s.parked[tenant]  # every queued job of the tenant has been re-read
            else:
                s.parked[tenant] = rows[-1][0]
            out = [r for r in rows if _job_id(r[1]) not in s.jobs]
            want -= len(rows)
            if want <= 0:
                return out, True
        if tenant in s.parked or after is None:
            return out, tenant in s.parked
        rows = self.store.tenant_jobs_after(tenant, JobState.PENDING, after.get(tenant, 0), want)
        if rows:
            after[tenant] = rows[-1][0]
        out += [r for r in rows if _job_id(r[1]) not in s.jobs]
        return out, len(rows) == want

    def load_tenants(self, now: float) -> None:
        """Every tenant from the store; a row that does not load is quarantined."""
        tenants, bad = self.store.load_tenants()
        self.state.tenants = {t.id: t for t in tenants}
        self.state.bad_tenants = {b.id for b in bad}
        self.ops.quarantine_rows(bad, now)


def _job_id(found: Job | BadRow) -> str:
    return found.id
