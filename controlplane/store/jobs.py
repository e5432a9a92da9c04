"""Jobs and bags in the store as the API sees them: submission, reads, pages, cancellation."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from controlplane.core.errors import Conflict, InvalidInput, NotFound, UnknownReference
from controlplane.core.models import (
    ACTIVE_STATES,
    Bag,
    BagSpec,
    Decision,
    Event,
    Job,
    JobKind,
    JobSpec,
    JobState,
    new_id,
)
from controlplane.core.units import HOUR
from controlplane.store.backend import Row, Tx
from controlplane.store.rows import (
    COUNT_UP,
    JOB_BODY_AT,
    JOB_COLUMNS,
    IdempotentCall,
    StoredAnswer,
    job_from_row,
    job_order,
    limit_clause,
    state_values,
)
from controlplane.store.tenants import TenantRows


class JobRows(TenantRows):
    """Jobs and bags: what the API calls."""

    # -- jobs: what the API calls --------------------------------------------------------------
    def submit_job(self, tenant_id: str, spec: JobSpec, *, now: float | None = None) -> Job:
        return self.submit_jobs(tenant_id, [spec], now=now)[0]

    def submit_jobs(self, tenant_id: str, specs: Sequence[JobSpec], *,
                    now: float | None = None) -> list[Job]:
        """Store validated specs as PENDING jobs (one transaction: all or none)."""
        self.get_tenant(tenant_id)
        t = self.control_time() if now is None else now
        jobs = [self._new_job(tenant_id, s, t) for s in specs]
        with self._tx() as db:
            self._insert_jobs(db, jobs)
        return jobs

    def submit_jobs_once(self, tenant_id: str, specs: Sequence[JobSpec], call: IdempotentCall, *,
                         now: float | None = None) -> StoredAnswer:
        """:meth:`submit_jobs` at most once per (tenant, key): the jobs and the key's answer are
        written in one transaction; a later call with the key returns that answer, creating nothing."""
        self.get_tenant(tenant_id)
        t = self.control_time() if now is None else now
        jobs = [self._new_job(tenant_id, s, t) for s in specs]
        return self._once(tenant_id, call, None, jobs, t)

    def idempotent_answer(self, tenant_id: str, key: str,
                          not_before: float = float("-inf")) -> StoredAnswer | None:
        """The answer recorded for ``key`` of ``tenant_id`` after ``not_before``, if any."""
        rows = self._q("SELECT fingerprint, status, response FROM idempotency "
                       "WHERE tenant_id = ? AND key = ? AND created_at > ?",
                       (tenant_id, key, not_before))
        return StoredAnswer(rows[0][0], rows[0][1], rows[0][2], True) if rows else None

    def prune_idempotency(self, not_before: float) -> int:
        """Forget every key answered at or before ``not_before`` (wall seconds); returns how many."""
        with self._tx() as db:
            return self._prune_keys(db, not_before)

    @staticmethod
    def _prune_keys(db: Tx, not_before: float) -> int:
        return int(db.execute("DELETE FROM idempotency WHERE created_at <= ?",
                              (not_before,)).rowcount)

    def _once(self, tenant_id: str, call: IdempotentCall, bag: Bag | None, jobs: Sequence[Job],
              now: float) -> StoredAnswer:
        body = call.render(bag, jobs)
        with self._tx() as db:
            self._prune_keys(db, call.not_before)  # an expired answer goes: the key creates anew
            row = db.execute("SELECT fingerprint, status, response FROM idempotency "
                             "WHERE tenant_id = ? AND key = ?", (tenant_id, call.key)).fetchone()
            if row is not None:
                return StoredAnswer(row[0], row[1], row[2], True)
            if bag is not None:
                db.execute("INSERT INTO bags VALUES (?, ?, ?, ?)",
                           (bag.id, tenant_id, now, bag.model_dump_json()))
            self._insert_jobs(db, jobs)
            db.execute("INSERT INTO idempotency VALUES (?, ?, ?, ?, ?, ?)",
                       (tenant_id, call.key, call.fingerprint, 201, body, call.at))
        return StoredAnswer(call.fingerprint, 201, body, False)

    def jobs_in_flight(self, tenant_id: str) -> int:
        """How many of the tenant's jobs are not finished yet."""
        states = [s.value for s in ACTIVE_STATES]
        rows = self._q(f"SELECT COUNT(*) FROM jobs WHERE tenant_id = ? AND state IN "
                       f"({','.join('?' * len(states))})", [tenant_id, *states])
        return int(rows[0][0])

    def _new_job(self, tenant_id: str, spec: JobSpec, now: float) -> Job:
        if not isinstance(spec, JobSpec):
            raise InvalidInput("spec", "must be a validated JobSpec", fix="JobSpec(**body)")
        deadline = spec.deadline
        if deadline is None and spec.deadline_hours is not None:
            deadline = now + spec.deadline_hours * HOUR
        if deadline is not None and deadline < now + (spec.compute_hours + spec.overhead_hours) * HOUR:
            raise Conflict(f"deadline: {deadline} leaves less than compute_hours + overhead_hours "
                           f"after the control-plane time {now}", fix="use a later deadline")
        return Job(id=new_id("job"), tenant_id=tenant_id, name=spec.name, kind=spec.kind,
                   spec=spec, bag_id=spec.bag_id, submitted_at=now, deadline_at=deadline)

    def _insert_jobs(self, db: Tx, jobs: Sequence[Job]) -> None:
        db.insert_many(
            "INSERT INTO jobs (id, tenant_id, kind, state, bag_id, submitted_at, body) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(j.id, j.tenant_id, j.kind.value, j.state.value, j.bag_id, j.submitted_at,
              j.model_dump_json()) for j in jobs])
        db.execute(COUNT_UP, ("jobs_submitted_total", len(jobs)))

    @classmethod
    def _job_or_stand_in(cls, r: tuple[Any, ...]) -> Job:
        """A job for the API's read views: a row that does not load shows as a stand-in built
        from its columns (state, tenant, kind) whose message says why, never as a 500."""
        found = job_from_row(r)
        if isinstance(found, Job):
            return found
        job_id, tenant_id, kind, state, bag_id, at, _body, _cancel = r
        kind = kind if kind in JobKind._value2member_map_ else JobKind.SPOT.value
        state = state if state in JobState._value2member_map_ else JobState.FAILED.value
        spec = JobSpec.model_construct(name=str(job_id), kind=JobKind(kind), compute_hours=0.0,
                                       workload="simulated")
        return Job.model_construct(id=str(job_id), tenant_id=str(tenant_id), name=str(job_id),
                                   kind=JobKind(kind), spec=spec, state=JobState(state),
                                   bag_id=bag_id, submitted_at=float(at or 0.0),
                                   message=f"the stored job {found.reason}")

    def list_jobs(self, tenant_id: str | None = None, *,
                  state: JobState | str | Iterable[JobState | str] | None = None,
                  kind: JobKind | str | None = None, bag_id: str | None = None,
                  limit: int = 1000, offset: int = 0, max_bytes: int | None = None,
                  after: str | None = None) -> list[Job]:
        """Jobs, oldest first; ``tenant_id=None`` means every tenant (admin views); with
        ``max_bytes`` reading stops after the stored bodies pass it. ``after`` (a job id of the
        same scope) is a cursor: the page starts past that job, one index range however deep."""
        where: list[str] = []
        args: list[Any] = []
        if tenant_id is not None:
            where.append("tenant_id = ?")
            args.append(tenant_id)
        if after is not None:
            where.append("seq > ?")
            args.append(self._cursor_seq(after, tenant_id))
        states = state_values(state)
        if states is not None:
            where.append(f"state IN ({','.join('?' * len(states))})")
            args.extend(states)
        if kind is not None:
            where.append("kind = ?")
            args.append(JobKind(kind).value)
        if bag_id is not None:
            where.append("bag_id = ?")
            args.append(bag_id)
        sql = f"SELECT {JOB_COLUMNS} FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq LIMIT ? OFFSET ?"
        rows = (self._q_bytes(sql, [*args, limit, offset], max_bytes, body_at=JOB_BODY_AT)
                if max_bytes is not None else self._q(sql, [*args, limit, offset]))
        return [self._job_or_stand_in(r) for r in rows]

    def _cursor_seq(self, after: str, tenant_id: str | None) -> int:
        """The seq of job ``after`` (a page cursor); :class:`UnknownReference` when it is no
        job of the scope."""
        rows = self._q("SELECT seq, tenant_id FROM jobs WHERE id = ?", (after,))
        if not rows or (tenant_id is not None and rows[0][1] != tenant_id):
            raise UnknownReference("after", f"{after!r} is not a job of this list",
                               fix="pass the X-Spotplane-Next-After header of the previous page, "
                                   "or leave `after` out for the first page")
        return int(rows[0][0])

    def _q_bytes(self, sql: str, args: Sequence[Any], max_bytes: int,
                 body_at: int = 0) -> list[tuple[Any, ...]]:
        """Rows of ``sql`` until their bodies (column ``body_at``) pass ``max_bytes``: the row that
        passes it is the last one read, so a caller capping its answer knows it was cut."""
        size = 0

        def past(row: Row) -> bool:
            nonlocal size
            size += len(row[body_at] or "")
            return size > max_bytes
        return self._backend.scan(sql, args, past)
    def job_page(self, tenant_id: str | None = None, *, states: list[str] | None = None,
                 kind: str | None = None, text: str | None = None, order_by: str = "seq",
                 descending: bool = False, now: float = 0.0, limit: int = 50,
                 offset: int = 0, after: str | None = None) -> tuple[int, list[Job]]:
        """One sorted, filtered page of jobs and how many match; ``order_by`` is a key of
        :data:`JOB_ORDER` (the dashboard's sortable columns), ``text`` matches id or name;
        ``after`` (a job id) starts the page past that job in the page's order."""
        where: list[str] = []
        args: list[Any] = []
        if tenant_id is not None:
            where.append("tenant_id = ?")
            args.append(tenant_id)
        if states:
            where.append(f"state IN ({','.join('?' * len(states))})")
            args.extend(states)
        if kind is not None:
            where.append("kind = ?")
            args.append(JobKind(kind).value)
        if text:
            like = self._sql.like
            where.append(f"(id {like} ? OR {self._sql.json('body', 'name')} {like} ?)")
            args.extend([f"%{text}%"] * 2)
        total = int(self._q("SELECT COUNT(*) FROM jobs"  # every match, not only past the cursor
                            + ((" WHERE " + " AND ".join(where)) if where else ""), args)[0][0])
        if after is not None:
            cursor, cursor_args = self._past(after, tenant_id, order_by, descending, now)
            where, args = [*where, cursor], [*args, *cursor_args]
        sql_where = (" WHERE " + " AND ".join(where)) if where else ""
        order = job_order(self._sql)[order_by]
        direction = "DESC" if descending else "ASC"
        order_args = [now] if "?" in order else []
        by = (f"seq {direction}" if order == "seq"  # the index's own order: no sort
              else f"{order} IS NULL, {order} {direction}, seq")
        rows = self._q(f"SELECT {JOB_COLUMNS} FROM jobs{sql_where} ORDER BY {by} LIMIT ? OFFSET ?",
                       [*args, *order_args, *order_args, limit, offset])
        return total, [self._job_or_stand_in(r) for r in rows]

    def _past(self, after: str, tenant_id: str | None, order_by: str, descending: bool,
              now: float) -> tuple[str, list[Any]]:
        """The condition (and its arguments) of the jobs past job ``after`` in :meth:`job_page`'s
        order: ``order_by``'s value (nulls last), then submission order."""
        seq = self._cursor_seq(after, tenant_id)
        order = job_order(self._sql)[order_by]
        if order == "seq":
            return ("seq < ?" if descending else "seq > ?"), [seq]
        at = [now] if "?" in order else []  # the control time the slack column is computed at
        value = self._q(f"SELECT {order} FROM jobs WHERE seq = ?", [*at, seq])[0][0]
        if value is None:
            return f"({order} IS NULL AND seq > ?)", [*at, seq]
        beyond = "<" if descending else ">"
        return (f"({order} IS NULL OR {order} {beyond} ? OR ({order} = ? AND seq > ?))",
                [*at, *at, value, *at, value, seq])

    def job_counts(self, tenant_id: str | None = None) -> dict[str, int]:
        """Jobs per state (every state, zeros included) for one tenant or all."""
        sql, args = "SELECT state, COUNT(*) FROM jobs", []
        if tenant_id is not None:
            sql, args = sql + " WHERE tenant_id = ?", [tenant_id]
        counts = dict.fromkeys((s.value for s in JobState), 0)
        counts.update({state: int(n) for state, n in self._q(sql + " GROUP BY state", args)})
        return counts

    def recent_events(self, tenant_id: str | None = None, *, kind: str, dst: str,
                      limit: int = 50) -> list[Event]:
        """The newest events of one kind into one state (e.g. transitions to PREEMPTED)."""
        sql = ("SELECT id, at, tenant_id, job_id, node_id, kind, src, dst, cause FROM events "
               "WHERE kind = ? AND dst = ?")
        args: list[Any] = [kind, dst]
        if tenant_id is not None:
            sql += " AND tenant_id = ?"
            args.append(tenant_id)
        rows = self._q(sql + " ORDER BY id DESC LIMIT ?", [*args, limit])
        return [self._event(r) for r in rows]

    def get_job(self, job_id: str, tenant_id: str | None = None) -> Job:
        """One job; NotFound when it does not exist *or* belongs to another tenant."""
        rows = self._q(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        if not rows or (tenant_id is not None and rows[0][1] != tenant_id):
            raise NotFound(f"job {job_id} not found")
        return self._job_or_stand_in(rows[0])

    def request_cancel(self, job_id: str, tenant_id: str | None = None) -> Job:
        """Flag a job for cancellation; the controller cancels it on its next tick."""
        job = self.get_job(job_id, tenant_id)
        if job.terminal:
            raise Conflict(f"job {job_id} is already {job.state}", fix="nothing to cancel")
        with self._tx() as db:
            db.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ?", (job_id,))
        job.cancel_requested = True
        return job

    def job_events(self, job_id: str, tenant_id: str | None = None, *, after: str | None = None,
                   limit: int | None = None) -> list[Event]:
        """The job's events, oldest first; with ``after`` / ``limit`` one cursor page."""
        self.get_job(job_id, tenant_id)
        where, args = self._after("events", "id", after, ["job_id = ?"], [job_id])
        rows = self._q("SELECT id, at, tenant_id, job_id, node_id, kind, src, dst, cause "
                       f"FROM events{where} ORDER BY id{limit_clause(limit)}", args)
        return [self._event(r) for r in rows]

    @staticmethod
    def _event(r: tuple[Any, ...]) -> Event:
        return Event(id=r[0], at=r[1], tenant_id=r[2], job_id=r[3], node_id=r[4], kind=r[5],
                     src=r[6], dst=r[7], cause=r[8])

    def events(self, since_id: int = 0, limit: int = 10_000) -> list[Event]:
        rows = self._q("SELECT id, at, tenant_id, job_id, node_id, kind, src, dst, cause "
                       "FROM events WHERE id > ? ORDER BY id LIMIT ?", (since_id, limit))
        return [self._event(r) for r in rows]

    def job_decisions(self, job_id: str, tenant_id: str | None = None, *,
                      after: str | None = None, limit: int = 100_000) -> list[Decision]:
        """The job's decisions, oldest first; with ``after`` the cursor page after that id."""
        self.get_job(job_id, tenant_id)
        return self.decisions(job_id, limit, after=after)

    def decisions(self, job_id: str | None = None, limit: int = 100_000, *,
                  after: str | None = None) -> list[Decision]:
        scope = ["job_id = ?"] if job_id is not None else []
        where, args = self._after("decisions", "id", after, scope, [job_id] if scope else [])
        rows = self._q("SELECT id, at, job_id, tenant_id, policy, action, zone, reason, "
                       f"observation FROM decisions{where} ORDER BY id LIMIT ?", [*args, limit])
        return [Decision(id=r[0], at=r[1], job_id=r[2], tenant_id=r[3], policy=r[4], action=r[5],
                         zone=r[6], reason=r[7], observation=json.loads(r[8])) for r in rows]

    # -- bags ----------------------------------------------------------------------------------
    def create_bag(self, tenant_id: str, spec: BagSpec, *,
                   now: float | None = None) -> tuple[Bag, list[Job]]:
        """Store a bag and one PENDING job per parameter set (one transaction)."""
        self.get_tenant(tenant_id)
        t = self.control_time() if now is None else now
        bag, jobs = self._new_bag(tenant_id, spec, t)
        with self._tx() as db:
            db.execute("INSERT INTO bags VALUES (?, ?, ?, ?)",
                       (bag.id, tenant_id, t, bag.model_dump_json()))
            self._insert_jobs(db, jobs)
        return bag, jobs

    def create_bag_once(self, tenant_id: str, spec: BagSpec, call: IdempotentCall, *,
                        now: float | None = None) -> StoredAnswer:
        """:meth:`create_bag` at most once per (tenant, key), like :meth:`submit_jobs_once`."""
        self.get_tenant(tenant_id)
        t = self.control_time() if now is None else now
        bag, jobs = self._new_bag(tenant_id, spec, t)
        return self._once(tenant_id, call, bag, jobs, t)

    def _new_bag(self, tenant_id: str, spec: BagSpec, now: float) -> tuple[Bag, list[Job]]:
        bag_id = new_id("bag")
        jobs = []
        for i, params in enumerate(spec.params):
            hours = spec.template.compute_hours if spec.compute_hours is None else spec.compute_hours[i]
            js = spec.template.model_copy(update={
                "name": f"{spec.name}-{i}", "params": params, "bag_id": bag_id,
                "compute_hours": hours})
            jobs.append(self._new_job(tenant_id, JobSpec.model_validate(js.model_dump()), now))
        bag = Bag(id=bag_id, tenant_id=tenant_id, name=spec.name, created_at=now, jobs=len(jobs),
                  estimate_hours=spec.template.compute_hours, job_ids=[j.id for j in jobs])
        return bag, jobs

    def get_bag(self, bag_id: str, tenant_id: str | None = None) -> Bag:
        rows = self._q("SELECT body, tenant_id FROM bags WHERE id = ?", (bag_id,))
        if not rows or (tenant_id is not None and rows[0][1] != tenant_id):
            raise NotFound(f"bag {bag_id} not found")
        return self._with_estimate(Bag.model_validate_json(rows[0][0]))

    def list_bags(self, tenant_id: str | None = None, *, after: str | None = None,
                  limit: int | None = None) -> list[Bag]:
        """The bags (of one tenant), oldest first; with ``after`` / ``limit`` one cursor page."""
        scope = ["tenant_id = ?"] if tenant_id is not None else []
        where, args = self._after("bags", "created_at", after, scope, [tenant_id] if scope else [])
        rows = self._q(f"SELECT body FROM bags{where} ORDER BY created_at, id{limit_clause(limit)}", args)
        return [self._with_estimate(Bag.model_validate_json(r[0])) for r in rows]

    def _with_estimate(self, bag: Bag) -> Bag:
        """Runtime estimate learned from the bag's finished jobs (seed 001 Sec. 5)."""
        rows = self._q("SELECT body FROM jobs WHERE bag_id = ? AND state = ?",
                       (bag.id, JobState.SUCCEEDED.value))
        done = [Job.model_validate_json(r[0]) for r in rows]
        if done:
            bag.finished = len(done)
            bag.estimate_hours = sum(j.progress_hours for j in done) / len(done)
        return bag

