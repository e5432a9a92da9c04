"""Step 1 of the reconcile loop: new submissions (``PENDING -> QUEUED``) and cancel flags.

Admission is bounded and fair: per tick at most ``ingest_batch`` stored jobs enter the in-memory
queues; each tenant holds at most ``queued_per_tenant`` queued jobs in memory and all of them at
most ``queued_total``, shared fairly between the tenants with work (``policies.admission``): a
tenant under its share gets in within the tick, tenants over theirs handing queued jobs back to
the store for it, and a tenant with none always gets its oldest.
A tenant's queued jobs a restart left in the store (``LoopState.admission.parked``) are re-read first,
then its new submissions, oldest first; the rest stay in the store for later ticks.
"""

from __future__ import annotations

import logging
from collections import Counter

from controlplane.core.models import Job, JobState
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.nodeops import NodeOps
from controlplane.reconcile.recorder import Recorder
from controlplane.reconcile.state import LoopState
from controlplane.store import BadRow, Store
from policies.admission import held_back, plan_slots, reclaim

Row = tuple[int, Job | BadRow]
log = logging.getLogger(__name__)


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
        if len(s.admission.seqs) > 2 * len(s.jobs) + self.settings.ingest_batch:
            s.admission.seqs = {i: q for i, q in s.admission.seqs.items() if i in s.jobs}
        for seq, job in rows:
            if isinstance(job, BadRow):
                continue
            s.jobs[job.id] = job
            s.admission.seqs[job.id] = seq
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
        """This tick's stored jobs for the in-memory queues, by ``policies.admission``'s fair
        shares of ``queued_total``: each tenant with work gets up to its share (at least one
        job), ``ingest_batch`` at most in all; when the slots are full, tenants over their share
        hand queued jobs back to the store for the newcomers. A tenant's parked queued jobs
        come before its new submissions, oldest first."""
        s, cfg = self.state, self.settings
        before, s.admission.held_back = s.admission.held_back, {}
        if not s.admission.parked and not (pending and self.store.has_pending()):
            return []  # nothing waits in the store: no query per tenant
        held = Counter(j.tenant_id for j in s.jobs.values() if j.state is JobState.QUEUED)
        room = {t: cfg.queued_per_tenant - held[t] for t in self.store.tenant_ids()}
        rows, more, asking = self._fetch_fair(held, {t: r for t, r in room.items() if r > 0},
                                              {} if pending else None)
        out = [row for got in rows.values() for row in got]
        plan = plan_slots(held, asking, cfg.queued_total, cfg.ingest_batch)
        evict = reclaim(held, plan.shares, len(out), cfg.queued_total)
        self._hand_back(evict)
        for tenant in more | evict.keys():  # the tenants with jobs left waiting
            why = held_back(plan, held, asking, tenant, cfg.queued_per_tenant)
            if why is not None:
                s.admission.held_back[tenant] = why
                if before.get(tenant) != why:
                    log.info("admission: %s", why)
        return out

    def _fetch_fair(self, held: Counter[str], room: dict[str, int],
                    cursor: dict[str, int] | None
                    ) -> tuple[dict[str, list[Row]], set[str], dict[str, int]]:
        """Each tenant's rows up to what the fair plan admits it, read until the plan asks no
        tenant for more than was read; the tenants that may have more waiting, and what each
        asks for (its room while it may have more)."""
        cfg = self.settings
        rows: dict[str, list[Row]] = {t: [] for t in room}
        more = set(room)  # tenants whose stored jobs may not all have been read
        while True:
            asking = {t: room[t] if t in more else len(got) for t, got in rows.items()}
            plan = plan_slots(held, asking, cfg.queued_total, cfg.ingest_batch)
            short = [t for t in rows if t in more and plan.admit.get(t, 0) > len(rows[t])]
            if not short:
                return rows, more, asking
            for tenant in short:
                got, full = self._tenant_rows(tenant, plan.admit[tenant] - len(rows[tenant]),
                                              cursor)
                rows[tenant] += got
                if not full:
                    more.discard(tenant)

    def _hand_back(self, evict: dict[str, int]) -> None:
        """Drop each tenant's newest ``evict[t]`` queued jobs from memory: they stay QUEUED in
        the store and are re-read, oldest first, as parked jobs when the tenant has room."""
        s = self.state
        for tenant, n in evict.items():
            mine = sorted((s.admission.seqs[j.id], j.id) for j in s.jobs.values()
                          if j.tenant_id == tenant and j.state is JobState.QUEUED
                          and j.id in s.admission.seqs and not j.assigned)
            back = mine[len(mine) - n:] if n > 0 else []
            if not back:
                continue
            for _, job_id in back:
                del s.jobs[job_id]
            s.admission.parked[tenant] = min(s.admission.parked.get(tenant, back[0][0]), back[0][0] - 1)
            s.work.count("jobs_handed_back_total", len(back))

    def _tenant_rows(self, tenant: str, want: int,
                     after: dict[str, int] | None) -> tuple[list[Row], bool]:
        """Up to ``want`` of one tenant's stored jobs not in memory, parked before pending (none
        when ``after`` is None), and whether it may have more."""
        s = self.state
        out: list[Row] = []
        if want > 0 and tenant in s.admission.parked:
            rows = self.store.tenant_jobs_after(tenant, JobState.QUEUED, s.admission.parked[tenant], want)
            if len(rows) < want:
                del s.admission.parked[tenant]  # every queued job of the tenant has been re-read
            else:
                s.admission.parked[tenant] = rows[-1][0]
            out = [r for r in rows if _job_id(r[1]) not in s.jobs]
            want -= len(rows)
            if want <= 0:
                return out, True
        if tenant in s.admission.parked or after is None:
            return out, tenant in s.admission.parked
        rows = self.store.tenant_jobs_after(tenant, JobState.PENDING, after.get(tenant, 0), want)
        if rows:
            after[tenant] = rows[-1][0]
        out += [r for r in rows if _job_id(r[1]) not in s.jobs]
        return out, len(rows) == want

    def load_tenants(self, now: float) -> None:
        """Every tenant from the store; a row that does not load is quarantined."""
        tenants, bad = self.store.load_tenants()
        self.state.tenants = {t.id: t for t in tenants}
        self.state.admission.bad_tenants = {b.id for b in bad}
        self.ops.quarantine_rows(bad, now)


def _job_id(found: Job | BadRow) -> str:
    return found.id
