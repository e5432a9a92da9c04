"""What the reconcile loop reads and commits in the store: its state, one transaction a tick,
intents, and the policy actors' saved state."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from controlplane.core.errors import Conflict, NotFound
from controlplane.core.models import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    Bag,
    Decision,
    Event,
    Job,
    JobState,
    Node,
    NodeState,
)
from controlplane.core.units import HOUR
from controlplane.store.backend import Tx
from controlplane.store.jobs import JobRows
from controlplane.store.rows import (
    ADD_DEMAND,
    COUNT_UP,
    INTENT_PENDING,
    JOB_COLUMNS,
    JOB_UPDATE,
    BadRow,
    Intent,
    job_from_row,
    log_bad,
    replace_sql,
    split_bad,
)
from controlplane.store.views import ViewRows


class ControllerRows(JobRows, ViewRows):
    """What the controller calls: its state in, one fenced commit a tick out."""

    # -- what the controller calls -------------------------------------------------------------
    def active_jobs(self) -> list[Job]:
        """Active jobs that load (a row that does not is logged and left out)."""
        return log_bad(*self.load_active_jobs())

    def load_active_jobs(self) -> tuple[list[Job], list[BadRow]]:
        """Active jobs that load, and the rows that do not (the controller quarantines them)."""
        states = [s.value for s in ACTIVE_STATES]
        rows = self._q(f"SELECT {JOB_COLUMNS} FROM jobs WHERE state IN "
                       f"({','.join('?' * len(states))}) ORDER BY seq", states)
        return split_bad(job_from_row(r) for r in rows)

    def load_placed_jobs(self) -> tuple[list[Job], list[BadRow]]:
        """Active jobs past the queue (starting, running, checkpointing, preempted) that load,
        and the rows that do not: what a restarted controller needs before its first tick."""
        states = [s.value for s in ACTIVE_STATES - {JobState.PENDING, JobState.QUEUED}]
        rows = self._q(f"SELECT {JOB_COLUMNS} FROM jobs WHERE state IN "
                       f"({','.join('?' * len(states))}) ORDER BY seq", states)
        return split_bad(job_from_row(r) for r in rows)

    def tenant_jobs_after(self, tenant_id: str, state: JobState, after_seq: int,
                          limit: int) -> list[tuple[int, Job | BadRow]]:
        """Up to ``limit`` of one tenant's jobs in ``state`` past ``after_seq``, oldest first
        (one range of the ``jobs_tenant_state`` index), each with its seq."""
        rows = self._q(f"SELECT {JOB_COLUMNS}, seq FROM jobs WHERE tenant_id = ? AND state = ? "
                       "AND seq > ? ORDER BY seq LIMIT ?",
                       (tenant_id, JobState(state).value, after_seq, limit))
        return [(int(r[-1]), job_from_row(r[:-1])) for r in rows]

    def load_waiting_jobs(self, ids: Sequence[str]) -> tuple[list[Job], list[BadRow]]:
        """The jobs among ``ids`` still PENDING or QUEUED (a backlog's cancelled jobs), by id."""
        out: list[Job | BadRow] = []
        for i in range(0, len(ids), 500):
            part = list(ids[i:i + 500])
            rows = self._q(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id IN "
                           f"({','.join('?' * len(part))}) AND state IN ('PENDING', 'QUEUED') "
                           "ORDER BY seq", part)
            out += [job_from_row(r) for r in rows]
        return split_bad(out)

    def has_pending(self) -> bool:
        """Whether any submission waits for the controller (one probe of an index)."""
        return bool(self._q("SELECT 1 FROM jobs WHERE state = 'PENDING' LIMIT 1"))

    def tenant_ids(self) -> list[str]:
        """Every tenant's id, oldest first (no row is parsed)."""
        return [r[0] for r in self._q("SELECT id FROM tenants ORDER BY created_at, id")]

    def new_jobs(self, known: set[str] | None = None) -> list[Job]:
        """PENDING jobs (submitted since the controller last looked) that load."""
        return log_bad(*self.load_new_jobs(known))

    def load_new_jobs(self, known: set[str] | None = None) -> tuple[list[Job], list[BadRow]]:
        """PENDING jobs not in ``known`` that load, and the rows that do not."""
        rows = self._q(f"SELECT {JOB_COLUMNS} FROM jobs WHERE state = ? ORDER BY seq",
                       (JobState.PENDING.value,))
        return split_bad(job_from_row(r) for r in rows if known is None or r[0] not in known)

    def quarantined(self) -> list[BadRow]:
        """Every row the controller quarantined, oldest first."""
        rows = self._q("SELECT tbl, id, reason, body FROM quarantine ORDER BY at, tbl, id")
        return [BadRow(t, i, reason, body=body) for t, i, reason, body in rows]

    def cancel_requests(self) -> set[str]:
        states = [s.value for s in TERMINAL_STATES]
        rows = self._q(f"SELECT id FROM jobs WHERE cancel_requested = 1 AND state NOT IN "
                       f"({','.join('?' * len(states))})", states)
        return {r[0] for r in rows}

    def live_nodes(self) -> list[Node]:
        return self.list_nodes(live_only=True)

    def pending_intents(self) -> list[Intent]:
        rows = self._q("SELECT id, kind, status, created_at, done_at, payload FROM intents "
                       "WHERE status = ? ORDER BY created_at, id", (INTENT_PENDING,))
        return [self._intent(r) for r in rows]

    def intents(self, kind: str | None = None) -> list[Intent]:
        sql = "SELECT id, kind, status, created_at, done_at, payload FROM intents"
        rows = self._q(sql + (" WHERE kind = ?" if kind else "") + " ORDER BY created_at, id",
                       (kind,) if kind else ())
        return [self._intent(r) for r in rows]

    @staticmethod
    def _intent(r: tuple[Any, ...]) -> Intent:
        return Intent(id=r[0], kind=r[1], status=r[2], created_at=r[3], done_at=r[4],
                      payload=json.loads(r[5]))

    def commit(self, *, jobs: Sequence[Job] = (), nodes: Sequence[Node] = (),
               events: Sequence[Event] = (), decisions: Sequence[Decision] = (),
               intents: Sequence[Intent] = (), control_time: float | None = None,
               counters: dict[str, float] | None = None,
               demand: dict[str, tuple[float, float]] | None = None,
               demand_at: float | None = None, epoch: int | None = None,
               quarantine: Sequence[BadRow] = ()) -> None:
        """Persist one step of the controller atomically (jobs/nodes upserted, logs appended).

        With ``epoch`` the commit is fenced: refused (Conflict) when a newer controller holds
        the lease, so two controllers never write over each other after a restart.
        ``quarantine``: rows that do not load; each is recorded (with its raw body) and a job or
        node row is marked FAILED, so no later load selects it again.
        """
        with self._tx() as db:
            if epoch is not None:
                row = db.execute("SELECT value FROM meta WHERE key = 'controller_epoch'").fetchone()
                if row is not None and int(row[0]) != epoch:
                    raise Conflict(f"controller epoch {epoch} is fenced by epoch {row[0]}",
                                   fix="a newer controller runs; this one must stop")
            if jobs:
                db.update_many("jobs", "id", JOB_UPDATE, [
                    (j.state.value, j.cost, j.on_demand_cost, j.gpu_hours,
                     j.model_dump_json(exclude={"cancel_requested"}), j.id) for j in jobs])
            if nodes:
                db.executemany(
                    "INSERT INTO nodes (id, state, job_id, intent_id, body, instance_id) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                    "state = excluded.state, job_id = excluded.job_id, body = excluded.body, "
                    "instance_id = excluded.instance_id",
                    [(n.id, n.state.value, n.job_id, n.intent_id, n.model_dump_json(),
                      n.instance_id) for n in nodes])
            if events:
                db.executemany(
                    "INSERT INTO events (at, tenant_id, job_id, node_id, kind, src, dst, cause) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [(e.at, e.tenant_id, e.job_id, e.node_id, e.kind, e.src, e.dst, e.cause)
                     for e in events])
            if decisions:
                db.executemany(
                    "INSERT INTO decisions (at, job_id, tenant_id, policy, action, zone, reason, "
                    "observation) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [(d.at, d.job_id, d.tenant_id, d.policy, d.action, d.zone, d.reason,
                      json.dumps(d.observation)) for d in decisions])
            if intents:
                db.executemany(
                    "INSERT INTO intents VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                    "status = excluded.status, done_at = excluded.done_at",
                    [(i.id, i.kind, i.status, i.created_at, i.done_at, json.dumps(i.payload))
                     for i in intents])
            if demand:
                hour = int((demand_at or 0.0) // HOUR)
                db.executemany(ADD_DEMAND, [(t, hour, hp, sp) for t, (hp, sp) in demand.items()])
            for name, by in (counters or {}).items():
                db.execute(COUNT_UP, (name, by))
            if control_time is not None:
                db.execute(replace_sql("meta"), ("control_time", repr(control_time)))
            self._quarantine(db, quarantine, control_time)

    @staticmethod
    def _quarantine(db: Tx, rows: Sequence[BadRow], at: float | None) -> None:
        for bad in rows:
            db.execute("INSERT INTO quarantine VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                       (bad.table, bad.id, at or 0.0, bad.reason, bad.body))
            if bad.table == "jobs":
                db.execute("UPDATE jobs SET state = ? WHERE id = ?",
                           (JobState.FAILED.value, bad.id))
            elif bad.table == "nodes":
                db.execute("UPDATE nodes SET state = ? WHERE id = ?",
                           (NodeState.FAILED.value, bad.id))

    def update_bag_estimate(self, bag_id: str) -> Bag:
        """Recompute and store the bag's runtime estimate from its finished jobs."""
        rows = self._q("SELECT body FROM bags WHERE id = ?", (bag_id,))
        if not rows:
            raise NotFound(f"bag {bag_id} not found")
        bag = self._with_estimate(Bag.model_validate_json(rows[0][0]))
        with self._tx() as db:
            db.execute("UPDATE bags SET body = ? WHERE id = ?", (bag.model_dump_json(), bag_id))
        return bag

    # -- policy actor state --------------------------------------------------------------------
    def put_policy_state(self, job_id: str, state: dict[str, Any]) -> None:
        with self._tx() as db:
            db.execute(replace_sql("policy_state"),
                       (job_id, json.dumps(state)))

    def put_policy_states(self, states: dict[str, dict[str, Any]]) -> None:
        with self._tx() as db:
            db.executemany(replace_sql("policy_state"),
                           [(k, json.dumps(v)) for k, v in states.items()])

    def policy_state(self, job_id: str) -> dict[str, Any] | None:
        rows = self._q("SELECT body FROM policy_state WHERE job_id = ?", (job_id,))
        return json.loads(rows[0][0]) if rows else None

