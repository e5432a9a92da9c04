"""The durable state of the control plane: one SQLite file in WAL mode (the embedded default) or
one PostgreSQL database, chosen by the target :class:`Store` is opened with (a path, or a URL).

Safe for concurrent use by several processes (the Serve replicas insert submissions and set
cancel flags while the controller reconciles): every process opens its own :class:`Store`;
writes run one at a time (SQLite's ``BEGIN IMMEDIATE``, PostgreSQL's advisory lock:
``controlplane.store.backend``). Ownership of columns
keeps writers from stepping on each other: the API only INSERTs jobs/tenants/bags and sets
``jobs.cancel_requested``; the controller owns every other job/node column.

Intents: the controller writes an intent (launch, terminate, preempt) *before* acting and marks it
done after; a crash in between leaves a pending intent that the next tick re-applies, and the
fleet's launch is idempotent on the intent id, so no node is launched twice and no job is lost.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from controlplane.core.counters import Buckets
from controlplane.core.errors import Conflict, InvalidInput, NotFound
from controlplane.core.models import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    Bag,
    BagSpec,
    CapacityPoint,
    CostSummary,
    Decision,
    Event,
    ForecastRow,
    Job,
    JobKind,
    JobSpec,
    JobState,
    Node,
    NodeState,
    Quota,
    Tenant,
    TenantSpec,
    ZoneInfo,
    hash_token,
    new_id,
    new_token,
)
from controlplane.core.units import HOUR
from controlplane.store.backend import Backend, PostgresBackend, Row, SQLiteBackend, Tx
from controlplane.store.dialect import Dialect, is_postgres, redact, sqlite_path
from controlplane.store.schema import ensure_schema

log = logging.getLogger("controlplane.store")

# The capacity history is bounded both ways: points older than a week of control-plane time,
# and all but the newest rows, go at every write (a refresh every 300 s of control time writes
# one point per pool: 2,016 a week per pool).
CAPACITY_MAX_AGE_S = 7 * 24 * 3600.0
CAPACITY_MAX_ROWS = 20_000

JOB_COLUMNS = "id, tenant_id, kind, state, bag_id, submitted_at, body, cancel_requested"
NODE_COLUMNS = "id, state, job_id, body"
INT_IDS = frozenset({"events", "decisions"})  # tables whose ids are numbers
JOB_BODY_AT = 6  # the body's place in JOB_COLUMNS
JOB_UPDATE = ("state", "cost", "on_demand_cost", "gpu_hours", "body")  # what a commit writes


def job_order(d: Dialect) -> dict[str, str]:
    """The dashboard's sortable job columns as SQL over the jobs table (``?`` is the control
    time) in dialect ``d``."""
    def num(path: str) -> str:
        return d.json("body", path, number=True)
    return {
        "submitted": "seq",
        "seq": "seq",
        "name": d.json("body", "name"),
        "state": "state",
        "kind": "kind",
        "tenant": "tenant_id",
        "cost": "cost",
        "preemptions": num("preemptions"),
        "checkpoints": num("checkpoints"),
        "progress": f"{num('progress_hours')} / NULLIF({num('spec.compute_hours')}, 0)",
        "slack": f"(({num('deadline_at')} - ?) / 3600.0 - "
                 f"({num('spec.compute_hours')} - {num('progress_hours')}))",
    }


JOB_ORDER: dict[str, str] = job_order(Dialect())  # SQLite's, the embedded default


# Tables written whole by key: (key columns, other columns) for :func:`replace_sql`.
REPLACED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "meta": (("key",), ("value",)),
    "zones": (("zone", "instance_type"), ("body",)),
    "quotas": (("pool", "accelerator"), ("body",)),
    "forecasts": (("tenant_id",), ("body",)),
    "policy_state": (("job_id",), ("body",)),
}


def replace_sql(table: str) -> str:
    """Insert a row of ``table`` or overwrite the one with its key (both backends' upsert)."""
    keys, rest = REPLACED[table]
    cols = keys + rest
    return (f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
            f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET "
            + ", ".join(f"{c} = excluded.{c}" for c in rest))


def open_backend(target: str | Path, timeout_s: float) -> Backend:
    """PostgreSQL for a ``postgresql://`` URL; otherwise a private SQLite file (or ``:memory:``)."""
    if is_postgres(target):
        return PostgresBackend(str(target), timeout_s)
    path = sqlite_path(target)
    if path != ":memory:":
        Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        private_file(Path(path))  # SQLite gives its -wal and -shm files the same mode
    return SQLiteBackend(path, timeout_s)


COUNT_UP = ("INSERT INTO counters (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE "
            "SET value = counters.value + excluded.value")
ADD_DEMAND = ("INSERT INTO demand VALUES (?, ?, ?, ?) ON CONFLICT (tenant_id, hour) DO UPDATE "
              "SET hp_gpu_hours = demand.hp_gpu_hours + excluded.hp_gpu_hours, "
              "spot_gpu_hours = demand.spot_gpu_hours + excluded.spot_gpu_hours")


def in_list(n: int) -> str:
    """``(?, ?, ...)`` for ``n`` values; ``(NULL)`` (matches nothing) for none."""
    return f"({','.join('?' * n)})" if n else "(NULL)"


LEASE_SQL = ("SELECT key, value FROM meta WHERE key IN ('controller_epoch', 'controller_holder', "
             "'controller_lease_until')")

INTENT_PENDING = "pending"
INTENT_DONE = "done"
INTENT_FAILED = "failed"


IDEMPOTENCY_TTL_S = 24 * 3600.0  # how long a key's answer is kept (Stripe keeps keys 24 h)


@dataclass(frozen=True)
class IdempotentCall:
    """A submission carrying an Idempotency-Key: the key, a digest of the request, and how to
    render the answer (status 201) that a retry with the same key gets back verbatim.

    ``at`` is wall-clock seconds (retries happen in wall time, whatever the control-plane
    clock's speed); an answer recorded ``ttl_s`` or more before ``at`` has expired: it is
    pruned, and the key creates anew."""

    key: str
    fingerprint: str
    render: Callable[[Bag | None, Sequence[Job]], str]
    at: float = 0.0
    ttl_s: float = IDEMPOTENCY_TTL_S

    @property
    def not_before(self) -> float:
        """Answers recorded at or before this instant have expired."""
        return self.at - self.ttl_s


@dataclass(frozen=True)
class StoredAnswer:
    """The answer recorded for an Idempotency-Key; ``replayed`` when it was not created now."""

    fingerprint: str
    status: int
    body: str
    replayed: bool


def private_file(path: Path) -> None:
    """Create ``path`` (if missing) readable and writable by its owner only, or make it so."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)


class Intent(BaseModel):
    """A side effect the controller is about to perform (written before it acts)."""

    id: str
    kind: str  # launch | terminate | preempt
    status: str = INTENT_PENDING
    created_at: float
    done_at: float | None = None
    payload: dict[str, Any]


@dataclass(frozen=True)
class BadRow:
    """A stored row that does not load as its model: the controller quarantines it."""

    table: str  # jobs | nodes | tenants
    id: str
    reason: str
    state: str | None = None  # the row's state column (jobs, nodes)
    tenant_id: str | None = None
    job_id: str | None = None  # nodes: the job the node was allocated to
    body: str | None = None  # the raw stored body, kept as evidence

    def describe(self) -> str:
        """One line for logs and ``spotplane up``: which row and why."""
        return f"{self.table[:-1]} {self.id}: {self.reason}"


def load_error(exc: Exception) -> str:
    """A short reason why a stored row does not load (the first validation errors)."""
    if isinstance(exc, ValidationError):
        parts = [f"{'.'.join(str(x) for x in e['loc']) or 'body'}: {e['msg']}"
                 for e in exc.errors()[:3]]
        return "does not validate (" + "; ".join(parts) + ")"
    return f"does not load ({type(exc).__name__}: {exc})"


LIVE_NODE_STATES = [s.value for s in NodeState
                    if s not in (NodeState.TERMINATED, NodeState.PREEMPTED, NodeState.FAILED)]


def _limit(limit: int | None) -> str:
    """`` LIMIT n`` (a checked int, inlined) or nothing."""
    return "" if limit is None else f" LIMIT {int(limit)}"


def _states(state: JobState | str | Iterable[JobState | str] | None) -> list[str] | None:
    if state is None:
        return None
    if isinstance(state, str):
        return [JobState(state).value]
    return [JobState(s).value for s in state]


def _split(found: Iterable[Any]) -> tuple[list[Any], list[BadRow]]:
    """Loaded models and the rows that did not load, apart."""
    good: list[Any] = []
    bad: list[BadRow] = []
    for f in found:
        (bad if isinstance(f, BadRow) else good).append(f)
    return good, bad


def _loud(good: list[Any], bad: list[BadRow]) -> list[Any]:
    """The loaded models; each row that did not load is logged (never dropped silently)."""
    for b in bad:
        log.error("stored %s (left out; the controller quarantines it)", b.describe())
    return good


class Store:
    """One process's handle on the spotplane database: a SQLite connection shared by its
    threads under a lock, or a pool of PostgreSQL connections (``controlplane.store.backend``)."""

    def __init__(self, target: str | Path, *, timeout_s: float = 60.0, create: bool = True) -> None:
        """Open the store at ``target``: a file path or ``sqlite:///PATH`` (SQLite), or a
        ``postgresql://`` URL; creates or upgrades its schema (``controlplane.store.schema``),
        a write, unless ``create`` is False (another connection of this process made it)."""
        self.url = str(target)
        self._backend = open_backend(target, timeout_s)
        self._sql = self._backend.dialect
        self.tx_seconds: Buckets = self._backend.tx_seconds
        where = redact(self.url)
        if not create:
            return
        try:
            with self._tx() as db:
                ensure_schema(db, self._sql, where)
        except BaseException:
            self._backend.close()
            raise

    @property
    def path(self) -> Path:
        """The SQLite file; a PostgreSQL store has none (InvalidInput)."""
        if isinstance(self._backend, PostgresBackend):
            raise InvalidInput("path", f"the store at {redact(self.url)} is a PostgreSQL database",
                               fix="use Store.url to open it again")
        return Path(sqlite_path(self.url))

    @property
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._sql.name

    def close(self) -> None:
        self._backend.close()

    # -- plumbing ------------------------------------------------------------------------------
    def _tx(self) -> Any:
        """One write transaction (a context manager yielding a :class:`Tx`)."""
        return self._backend.tx()

    def _q(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        return self._backend.query(sql, args)

    def _after(self, table: str, order: str, after: str | None, scope: Sequence[str] = (),
               scope_args: Sequence[Any] = ()) -> tuple[str, list[Any]]:
        """The WHERE clause (and its arguments) of ``table``'s rows in ``scope`` that come after
        the row whose id is ``after`` in the order ``(order, id)``: a cursor page read in SQL.
        An ``after`` that is no id of the list is an :class:`InvalidInput` naming ``after``."""
        conds, args = list(scope), list(scope_args)
        if after is not None:
            numeric = table in INT_IDS
            key: Any = int(after) if numeric and after.isdigit() and len(after) < 19 else after
            where = " AND ".join(["id = ?", *scope])
            found = (self._q(f"SELECT {order} FROM {table} WHERE {where}", [key, *scope_args])
                     if not numeric or isinstance(key, int) else [])
            if not found:
                raise InvalidInput("after", f"{after!r} is not an id of this list",
                                   fix="pass the X-Spotplane-Next-After of the previous page, or "
                                       "leave after out for the first page")
            conds.append(f"({order}, id) > (?, ?)")
            args += [found[0][0], key]
        return (" WHERE " + " AND ".join(conds) if conds else ""), args

    # -- meta / clock --------------------------------------------------------------------------
    def get_meta(self, key: str, default: str | None = None) -> str | None:
        rows = self._q("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else default

    def set_meta(self, key: str, value: str) -> None:
        with self._tx() as db:
            db.execute(replace_sql("meta"), (key, value))

    def take_controller_lease(self) -> int:
        """Become THE controller: a new fencing epoch; commits of older epochs are refused."""
        with self._tx() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'controller_epoch'").fetchone()
            epoch = (int(row[0]) if row else 0) + 1
            db.execute(replace_sql("meta"), ("controller_epoch", str(epoch)))
        return epoch

    # -- controller lease (standby) -----------------------------------------------------------
    # The lease is three meta keys: controller_epoch (the fencing epoch), controller_holder and
    # controller_lease_until (seconds on the database's clock, so controllers on machines whose
    # clocks disagree still agree on when it expires). The active controller renews it; a
    # standby claims it only once it has expired, and each claim bumps the epoch, so the
    # previous holder's commits are refused from then on.
    def claim_controller_lease(self, holder: str, ttl_s: float, *, force: bool = False,
                               now: float | None = None) -> int | None:
        """Take the lease for ``ttl_s`` seconds when it is free, expired, held by ``holder``
        or ``force``d: the new fencing epoch; None while another holds it. ``now`` replaces
        the database's clock (tests)."""
        with self._tx() as db:
            t = self._db_now(db) if now is None else now
            lease = self._lease(db)
            live = lease["holder"] and lease["holder"] != holder and lease["until"] > t
            if live and not force:
                return None
            epoch = int(lease["epoch"]) + 1
            db.executemany(replace_sql("meta"), [
                ("controller_epoch", str(epoch)), ("controller_holder", holder),
                ("controller_lease_until", repr(t + ttl_s))])
        return epoch

    def renew_controller_lease(self, holder: str, epoch: int, ttl_s: float, *,
                               now: float | None = None) -> float:
        """Extend the lease ``holder`` holds at ``epoch`` to now + ``ttl_s``; Conflict when a
        newer epoch or another holder took it. Returns the new expiry (database clock)."""
        with self._tx() as db:
            t = self._db_now(db) if now is None else now
            lease = self._lease(db)
            if int(lease["epoch"]) != epoch or lease["holder"] != holder:
                raise Conflict(f"controller lease of epoch {epoch} was taken by {lease['holder'] or '?'}"
                               f" (epoch {lease['epoch']})",
                               fix="this controller stands by; the lease holder runs the loop")
            db.execute(replace_sql("meta"), ("controller_lease_until", repr(t + ttl_s)))
        return t + ttl_s

    def controller_lease(self) -> dict[str, Any]:
        """The lease as stored: ``epoch``, ``holder`` ('' when none) and ``until``, with
        ``now``, the database's clock as it was read (compare ``until`` with that)."""
        lease = self._lease_of(self._q(LEASE_SQL))  # then the clock: never before the lease
        return {**lease, "now": float(self._q(self._sql.now)[0][0])}

    @classmethod
    def _lease(cls, db: Tx) -> dict[str, Any]:
        return cls._lease_of(db.execute(LEASE_SQL).fetchall())

    def _db_now(self, db: Tx) -> float:
        """The database server's clock, Unix seconds."""
        return float(db.execute(self._sql.now).fetchone()[0])

    @staticmethod
    def _lease_of(found: Sequence[Any]) -> dict[str, Any]:
        rows = {str(k): str(v) for k, v in found}
        return {"epoch": int(rows.get("controller_epoch", 0)),
                "holder": rows.get("controller_holder", ""),
                "until": float(rows.get("controller_lease_until", 0.0))}

    def control_time(self) -> float:
        """The control-plane time as of the controller's last tick (0.0 before the first)."""
        return float(self.get_meta("control_time", "0") or 0)

    # -- tenants -------------------------------------------------------------------------------
    def create_tenant(self, spec: TenantSpec | str, *, max_gpus: int | None = None,
                      token: str | None = None, now: float | None = None) -> tuple[Tenant, str]:
        """Create a tenant; returns it and its API token (shown once, stored hashed)."""
        if isinstance(spec, str):
            spec = TenantSpec(name=spec, max_gpus=max_gpus or 64)
        token = token or new_token()
        tenant = Tenant(id=new_id("ten"), name=spec.name, max_gpus=spec.max_gpus,
                        created_at=self.control_time() if now is None else now,
                        token_hash=hash_token(token))
        try:
            with self._tx() as db:
                db.execute("INSERT INTO tenants VALUES (?, ?, ?, ?, ?)",
                           (tenant.id, tenant.name, tenant.token_hash, tenant.max_gpus,
                            tenant.created_at))
        except self._sql.integrity_errors() as exc:
            raise Conflict(f"tenant {spec.name!r} already exists",
                           fix="choose another name") from exc
        return tenant, token

    def _tenant(self, row: tuple[Any, ...]) -> Tenant:
        return Tenant(id=row[0], name=row[1], token_hash=row[2], max_gpus=row[3],
                      created_at=row[4])

    def _tenant_row(self, row: tuple[Any, ...]) -> Tenant | BadRow:
        """A tenant from its row, or the reason it does not load."""
        try:
            return self._tenant(row)
        except Exception as exc:  # noqa: BLE001 - any unloadable row is quarantined, not fatal
            return BadRow("tenants", str(row[0]), load_error(exc), tenant_id=str(row[0]))

    def load_tenants(self) -> tuple[list[Tenant], list[BadRow]]:
        """Every tenant that loads, and the rows that do not (the controller's view)."""
        return _split(self._tenant_row(r)
                      for r in self._q("SELECT * FROM tenants ORDER BY created_at, id"))

    def tenant_by_token(self, token: str) -> Tenant | None:
        rows = self._q("SELECT * FROM tenants WHERE token_hash = ?", (hash_token(token),))
        found = self._tenant_row(rows[0]) if rows else None
        if isinstance(found, BadRow):
            log.error("refusing the token of %s", found.describe())
            return None
        return found

    def get_tenant(self, tenant_id: str) -> Tenant:
        rows = self._q("SELECT * FROM tenants WHERE id = ? OR name = ?", (tenant_id, tenant_id))
        if not rows:
            raise NotFound(f"tenant {tenant_id} not found")
        return self._tenant(rows[0])

    def list_tenants(self, *, after: str | None = None, limit: int | None = None) -> list[Tenant]:
        """Every tenant that loads, oldest first (a row that does not is logged and left out);
        with ``after`` / ``limit`` one cursor page of them."""
        if after is None and limit is None:
            return _loud(*self.load_tenants())
        where, args = self._after("tenants", "created_at", after)
        rows = self._q(f"SELECT * FROM tenants{where} ORDER BY created_at, id{_limit(limit)}", args)
        return _loud(*_split(self._tenant_row(r) for r in rows))

    def add_demand(self, tenant_id: str, at: float, hp_gpu_hours: float,
                   spot_gpu_hours: float) -> None:
        """Accumulate GPU-hours demanded in the hour containing ``at`` (forecaster input)."""
        hour = int(at // HOUR)
        with self._tx() as db:
            db.execute(ADD_DEMAND, (tenant_id, hour, hp_gpu_hours, spot_gpu_hours))

    def demand_history(self, tenant_id: str, hours: int, until: float,
                       kind: str = "hp") -> list[float]:
        """Mean GPUs demanded per hour over the ``hours`` whole hours before ``until``."""
        last = int(until // HOUR)
        col = "hp_gpu_hours" if kind == "hp" else "spot_gpu_hours"
        rows = dict(self._q(f"SELECT hour, {col} FROM demand WHERE tenant_id = ? AND hour >= ? "
                            "AND hour < ?", (tenant_id, last - hours, last)))
        return [float(rows.get(h, 0.0)) for h in range(last - hours, last)]

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
            raise InvalidInput("deadline", f"{deadline} leaves less than compute_hours + "
                               "overhead_hours before it", fix="use a later deadline")
        return Job(id=new_id("job"), tenant_id=tenant_id, name=spec.name, kind=spec.kind,
                   spec=spec, bag_id=spec.bag_id, submitted_at=now, deadline_at=deadline)

    def _insert_jobs(self, db: Tx, jobs: Sequence[Job]) -> None:
        db.insert_many(
            "INSERT INTO jobs (id, tenant_id, kind, state, bag_id, submitted_at, body) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(j.id, j.tenant_id, j.kind.value, j.state.value, j.bag_id, j.submitted_at,
              j.model_dump_json()) for j in jobs])
        db.execute(COUNT_UP, ("jobs_submitted_total", len(jobs)))

    @staticmethod
    def _job_row(r: tuple[Any, ...]) -> Job | BadRow:
        """A job from its row (``JOB_COLUMNS``), or the reason it does not load."""
        job_id, tenant_id, _kind, state, _bag, _at, body, cancel = r
        try:
            job = Job.model_validate_json(body)
            if job.id != job_id or job.tenant_id != tenant_id:
                raise ValueError(f"the body is job {job.id} of {job.tenant_id}, "
                                 f"the row job {job_id} of {tenant_id}")
        except Exception as exc:  # noqa: BLE001 - any unloadable row is quarantined, not fatal
            return BadRow("jobs", str(job_id), load_error(exc), state=state, tenant_id=tenant_id,
                          body=body if isinstance(body, str) else None)
        job.cancel_requested = bool(cancel)
        return job

    @classmethod
    def _job_or_stand_in(cls, r: tuple[Any, ...]) -> Job:
        """A job for the API's read views: a row that does not load shows as a stand-in built
        from its columns (state, tenant, kind) whose message says why, never as a 500."""
        found = cls._job_row(r)
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
        states = _states(state)
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
        """The seq of job ``after`` (a page cursor); InvalidInput when it is no job of the scope."""
        rows = self._q("SELECT seq, tenant_id FROM jobs WHERE id = ?", (after,))
        if not rows or (tenant_id is not None and rows[0][1] != tenant_id):
            raise InvalidInput("after", f"{after!r} is not a job of this list",
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
        ``after`` (a job id, in submission order only) starts the page past that job."""
        where: list[str] = []
        args: list[Any] = []
        if after is not None:
            if JOB_ORDER[order_by] != "seq":
                raise InvalidInput("after", f"pages by cursor only in submission order, not by "
                                   f"{order_by}", fix="sort by submitted, or page with offset")
            where.append("seq < ?" if descending else "seq > ?")
            args.append(self._cursor_seq(after, tenant_id))
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
        sql_where = (" WHERE " + " AND ".join(where)) if where else ""
        count_where = [w for w in where if not w.startswith("seq ")]  # every match, not the rest
        count_args = args[1:] if after is not None else args
        total = int(self._q("SELECT COUNT(*) FROM jobs"
                            + ((" WHERE " + " AND ".join(count_where)) if count_where else ""),
                            count_args)[0][0])
        order = job_order(self._sql)[order_by]
        direction = "DESC" if descending else "ASC"
        order_args = [now] if "?" in order else []
        by = (f"seq {direction}" if order == "seq"  # the index's own order: no sort
              else f"{order} IS NULL, {order} {direction}, seq")
        rows = self._q(f"SELECT {JOB_COLUMNS} FROM jobs{sql_where} ORDER BY {by} LIMIT ? OFFSET ?",
                       [*args, *order_args, *order_args, limit, offset])
        return total, [self._job_or_stand_in(r) for r in rows]

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
                       f"FROM events{where} ORDER BY id{_limit(limit)}", args)
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
        rows = self._q(f"SELECT body FROM bags{where} ORDER BY created_at, id{_limit(limit)}", args)
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

    # -- fleet views ---------------------------------------------------------------------------
    def list_nodes(self, state: NodeState | Iterable[NodeState] | None = None,
                   *, live_only: bool = False) -> list[Node]:
        """Nodes that load (a row that does not is logged and left out)."""
        return _loud(*self.load_nodes(state, live_only=live_only))

    def node_page(self, *, tenant_id: str | None = None, live_only: bool = False,
                  after: str | None = None, limit: int | None = None) -> list[Node]:
        """One cursor page of the nodes in launch order: those running ``tenant_id``'s jobs
        (every node for None), ``live_only`` without gone ones."""
        scope: list[str] = []
        args: list[Any] = []
        if live_only:
            scope.append(f"state IN {in_list(len(LIVE_NODE_STATES))}")
            args += LIVE_NODE_STATES
        if tenant_id is not None:
            scope.append(f"{self._sql.json('body', 'tenant_id')} = ?")
            args.append(tenant_id)
        where, args = self._after("nodes", "rowid", after, scope, args)
        rows = self._q(f"SELECT {NODE_COLUMNS} FROM nodes{where} ORDER BY rowid, id{_limit(limit)}",
                       args)
        return _loud(*_split(self._node_row(r) for r in rows))

    def load_nodes(self, state: NodeState | Iterable[NodeState] | None = None, *,
                   live_only: bool = False) -> tuple[list[Node], list[BadRow]]:
        """Nodes that load, and the rows that do not."""
        if live_only:
            state = [NodeState(s) for s in LIVE_NODE_STATES]
        if state is None:
            rows = self._q(f"SELECT {NODE_COLUMNS} FROM nodes ORDER BY rowid")
        else:
            states = [NodeState(state).value] if isinstance(state, str) else [
                NodeState(s).value for s in state]
            rows = self._q(f"SELECT {NODE_COLUMNS} FROM nodes WHERE state IN "
                           f"({','.join('?' * len(states))}) ORDER BY rowid", states)
        return _split(self._node_row(r) for r in rows)

    def job_nodes(self, job_id: str, node_ids: Iterable[str] = ()) -> list[Node]:
        """The nodes a job holds or held (by their job column, or named in ``node_ids``)."""
        ids = sorted(set(node_ids))
        rows = self._q(f"SELECT {NODE_COLUMNS} FROM nodes WHERE job_id = ? OR id IN "
                       f"{in_list(len(ids))} ORDER BY rowid", [job_id, *ids])
        return _loud(*_split(self._node_row(r) for r in rows))

    @staticmethod
    def _node_row(r: tuple[Any, ...]) -> Node | BadRow:
        """A node from its row (``NODE_COLUMNS``), or the reason it does not load."""
        node_id, state, job_id, body = r
        try:
            node = Node.model_validate_json(body)
            if node.id != node_id:
                raise ValueError(f"the body is node {node.id}, the row node {node_id}")
        except Exception as exc:  # noqa: BLE001 - any unloadable row is quarantined, not fatal
            return BadRow("nodes", str(node_id), load_error(exc), state=state, job_id=job_id,
                          body=body if isinstance(body, str) else None)
        return node

    def zones(self) -> list[ZoneInfo]:
        """The latest catalog + availability snapshot the controller wrote."""
        return [ZoneInfo.model_validate_json(r[0])
                for r in self._q("SELECT body FROM zones ORDER BY zone, instance_type")]

    def put_zones(self, zones: Sequence[ZoneInfo]) -> None:
        with self._tx() as db:
            db.executemany(replace_sql("zones"),
                           [(z.zone, z.instance_type, z.model_dump_json()) for z in zones])

    # -- cost ----------------------------------------------------------------------------------
    def cost_by_tenant(self, tenant_id: str | None = None) -> list[CostSummary]:
        """Spend per tenant against the on-demand-only counterfactual (same GPU hours)."""
        sql = ("SELECT t.id, t.name, COALESCE(SUM(j.cost), 0), COALESCE(SUM(j.on_demand_cost), 0), "
               "COALESCE(SUM(j.gpu_hours), 0), COUNT(j.id) FROM tenants t LEFT JOIN jobs j "
               "ON j.tenant_id = t.id")
        args: list[Any] = []
        if tenant_id is not None:
            sql += " WHERE t.id = ?"
            args.append(tenant_id)
        out = []
        for tid, name, cost, od, gh, n in self._q(sql + " GROUP BY t.id ORDER BY t.name", args):
            savings = 100.0 * (1 - cost / od) if od > 0 else 0.0
            out.append(CostSummary(tenant_id=tid, tenant_name=name, cost=cost, on_demand_cost=od,
                                   savings_pct=savings, gpu_hours=gh, jobs=n))
        return out

    # -- quotas and forecasts ------------------------------------------------------------------
    def set_quotas(self, quotas: Sequence[Quota]) -> None:
        with self._tx() as db:
            db.executemany(replace_sql("quotas"),
                           [(q.pool, q.accelerator, q.model_dump_json()) for q in quotas])

    def quotas(self) -> list[Quota]:
        return [Quota.model_validate_json(r[0])
                for r in self._q("SELECT body FROM quotas ORDER BY pool, accelerator")]

    def add_capacity(self, points: Sequence[CapacityPoint], *,
                     max_age_s: float = CAPACITY_MAX_AGE_S,
                     max_rows: int = CAPACITY_MAX_ROWS) -> int:
        """Append one refresh's points, then prune points older than ``max_age_s`` before the
        newest point and all but the newest ``max_rows``; returns how many were pruned."""
        if not points:
            return 0
        newest = max(p.at for p in points)
        with self._tx() as db:
            db.executemany("INSERT INTO capacity_history (at, accelerator, body) VALUES (?, ?, ?)",
                           [(p.at, p.accelerator, p.model_dump_json(exclude={"id"})) for p in points])
            gone = db.execute("DELETE FROM capacity_history WHERE at < ?",
                              (newest - max_age_s,)).rowcount
            gone += db.execute("DELETE FROM capacity_history WHERE id <= (SELECT id FROM "
                               "capacity_history ORDER BY id DESC LIMIT 1 OFFSET ?)",
                               (max_rows,)).rowcount
        return gone

    def capacity_history(self, *, accelerator: str | None = None, after: int | None = None,
                         limit: int = 500) -> list[CapacityPoint]:
        """Points oldest first: those with ``id > after``, or without ``after`` the newest
        ``limit`` (a chart's window); at most ``limit`` either way."""
        where: list[str] = []
        args: list[Any] = []
        if accelerator is not None:
            where.append("accelerator = ?")
            args.append(accelerator)
        if after is not None:
            where.append("id > ?")
            args.append(after)
        sql = "SELECT id, body FROM capacity_history"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY id {'ASC' if after is not None else 'DESC'} LIMIT ?"
        rows = self._q(sql, [*args, limit])
        points = [CapacityPoint.model_validate_json(body).model_copy(update={"id": i})
                  for i, body in rows]
        return points if after is not None else points[::-1]

    def put_forecasts(self, rows: Sequence[ForecastRow]) -> None:
        with self._tx() as db:
            db.executemany(replace_sql("forecasts"),
                           [(f.tenant_id, f.model_dump_json()) for f in rows])

    def forecasts(self, tenant_id: str | None = None) -> list[ForecastRow]:
        rows = self._q("SELECT body FROM forecasts ORDER BY tenant_id")
        out = [ForecastRow.model_validate_json(r[0]) for r in rows]
        return [f for f in out if tenant_id is None or f.tenant_id == tenant_id]

    # -- metrics -------------------------------------------------------------------------------
    def incr(self, name: str, by: float = 1.0) -> None:
        with self._tx() as db:
            db.execute(COUNT_UP, (name, by))

    def metrics(self) -> dict[str, float]:
        """Counters (``*_total``) and gauges (jobs per state/kind, nodes per state, cost)."""
        out: dict[str, float] = {k: float(v) for k, v in self._q("SELECT name, value FROM counters")}
        for state in JobState:
            out[f"jobs{{state=\"{state.value}\"}}"] = 0.0
        cost = od = 0.0
        for state, kind, n, c, o in self._q("SELECT state, kind, n, cost, on_demand_cost FROM job_totals "
                                            "WHERE n > 0"):
            out[f"jobs{{state=\"{state}\"}}"] += n
            out[f"jobs_by_kind{{kind=\"{kind}\",state=\"{state}\"}}"] = float(n)
            cost, od = cost + c, od + o
        for state, n in self._q("SELECT state, COUNT(*) FROM nodes GROUP BY state"):
            out[f"nodes{{state=\"{state}\"}}"] = float(n)
        out["cost_dollars"] = float(cost)
        out["on_demand_cost_dollars"] = float(od)
        out["control_time_seconds"] = self.control_time()
        return out

    def tx_histogram(self) -> Buckets:
        """A copy of this process's write-transaction latency histogram."""
        return self.tx_seconds.copy()

    def metrics_snapshot(self) -> dict[str, Any]:
        """Everything ``serve.metrics.StoreCollector`` exports, read at scrape time."""
        now = self.control_time()
        names = dict(self._q("SELECT id, name FROM tenants"))
        queue: dict[tuple[str, str, str], tuple[float, float]] = {}
        j = self._sql.json
        for pool, kind, tenant, entered in self._q(
                f"SELECT COALESCE({j('j.body', 'spec.accelerator')}, 'any'), j.kind, "
                "j.tenant_id, COALESCE((SELECT MAX(e.at) FROM events e WHERE e.job_id = j.id "
                "AND e.dst = 'QUEUED'), j.submitted_at) FROM jobs j WHERE j.state = 'QUEUED'"):
            key = (pool, kind, names.get(tenant, tenant))
            depth, oldest = queue.get(key, (0.0, 0.0))
            queue[key] = (depth + 1, max(oldest, now - entered))
        live = [s.value for s in NodeState if s not in (NodeState.TERMINATED,
                                                        NodeState.PREEMPTED, NodeState.FAILED)]
        nodes = [((c, z, m, a, st), n) for c, z, m, a, st, n in self._q(
            f"SELECT {j('body', 'cloud')}, {j('body', 'zone')}, "
            f"{j('body', 'market')}, {j('body', 'accelerator')}, state, "
            f"COUNT(*) FROM nodes WHERE state IN ({','.join('?' * len(live))}) GROUP BY 1, 2, 3, "
            "4, 5 ORDER BY 1, 2, 3, 4, 5", live)]
        # the current hour so far; on an hour's boundary, the hour that just ended
        hour, elapsed = int(now // HOUR), (now % HOUR) / HOUR
        if elapsed == 0:
            hour, elapsed = hour - 1, 1.0
        forecast = {}
        for f in self.forecasts():
            i = hour - int(f.at // HOUR)
            if 0 <= i < min(len(f.mean), len(f.upper)):
                forecast[names.get(f.tenant_id, f.tenant_id)] = (f.mean[i], f.upper[i])
        realised = {names.get(t, t): gh / elapsed for t, gh in self._q(
            "SELECT tenant_id, hp_gpu_hours FROM demand WHERE hour = ?", (hour,))}
        return {
            "control_time": now,
            "counters": {k: float(v) for k, v in self._q("SELECT name, value FROM counters")},
            "jobs": self._q("SELECT state, kind, COUNT(*) FROM jobs GROUP BY 1, 2 ORDER BY 1, 2"),
            "queue": queue,
            "nodes": nodes,
            "cost": [(c.tenant_name, c.cost, c.on_demand_cost, c.gpu_hours)
                     for c in self.cost_by_tenant()],
            "quotas": self.quotas(),
            "allocators": json.loads(self.get_meta("quota_allocators", "{}") or "{}"),
            "forecast": forecast,
            "realised": realised,
        }

    def max_spot_queue_seconds(self, now: float, window_seconds: float) -> float:
        """Longest time a spot job waited in QUEUED among waits that ended in the last
        ``window_seconds`` or are still going on, a PENDING one since its submission (GFS
        Eq. 11's max spot queueing time over H)."""
        entered = ("(SELECT MAX(q.at) FROM events q WHERE q.job_id = {job} AND q.dst = 'QUEUED'"
                   " AND q.id < {before})")
        ended = self._q(
            "SELECT MAX(e.at - " + entered.format(job="e.job_id", before="e.id") + ") "
            "FROM events e JOIN jobs j ON j.id = e.job_id "
            "WHERE j.kind = 'spot' AND e.src = 'QUEUED' AND e.at >= ?", (now - window_seconds,))
        ongoing = self._q(
            "SELECT MAX(? - " + entered.format(job="j.id", before="1e18") + ") "
            "FROM jobs j WHERE j.kind = 'spot' AND j.state = 'QUEUED'", (now,))
        # a backlog the controller has not admitted yet waits too: since its submission (the
        # oldest is one probe of the jobs_waiting index, however long the backlog)
        pending = self._q("SELECT ? - MIN(submitted_at) FROM jobs WHERE state = 'PENDING' "
                          "AND kind = 'spot'", (now,))
        waits = [w for (w,) in ended + ongoing + pending if w is not None]
        return max([0.0, *waits])

    # -- what the controller calls -------------------------------------------------------------
    def active_jobs(self) -> list[Job]:
        """Active jobs that load (a row that does not is logged and left out)."""
        return _loud(*self.load_active_jobs())

    def load_active_jobs(self) -> tuple[list[Job], list[BadRow]]:
        """Active jobs that load, and the rows that do not (the controller quarantines them)."""
        states = [s.value for s in ACTIVE_STATES]
        rows = self._q(f"SELECT {JOB_COLUMNS} FROM jobs WHERE state IN "
                       f"({','.join('?' * len(states))}) ORDER BY seq", states)
        return _split(self._job_row(r) for r in rows)

    def load_placed_jobs(self) -> tuple[list[Job], list[BadRow]]:
        """Active jobs past the queue (starting, running, checkpointing, preempted) that load,
        and the rows that do not: what a restarted controller needs before its first tick."""
        states = [s.value for s in ACTIVE_STATES - {JobState.PENDING, JobState.QUEUED}]
        rows = self._q(f"SELECT {JOB_COLUMNS} FROM jobs WHERE state IN "
                       f"({','.join('?' * len(states))}) ORDER BY seq", states)
        return _split(self._job_row(r) for r in rows)

    def tenant_jobs_after(self, tenant_id: str, state: JobState, after_seq: int,
                          limit: int) -> list[tuple[int, Job | BadRow]]:
        """Up to ``limit`` of one tenant's jobs in ``state`` past ``after_seq``, oldest first
        (one range of the ``jobs_tenant_state`` index), each with its seq."""
        rows = self._q(f"SELECT {JOB_COLUMNS}, seq FROM jobs WHERE tenant_id = ? AND state = ? "
                       "AND seq > ? ORDER BY seq LIMIT ?",
                       (tenant_id, JobState(state).value, after_seq, limit))
        return [(int(r[-1]), self._job_row(r[:-1])) for r in rows]

    def load_waiting_jobs(self, ids: Sequence[str]) -> tuple[list[Job], list[BadRow]]:
        """The jobs among ``ids`` still PENDING or QUEUED (a backlog's cancelled jobs), by id."""
        out: list[Job | BadRow] = []
        for i in range(0, len(ids), 500):
            part = list(ids[i:i + 500])
            rows = self._q(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id IN "
                           f"({','.join('?' * len(part))}) AND state IN ('PENDING', 'QUEUED') "
                           "ORDER BY seq", part)
            out += [self._job_row(r) for r in rows]
        return _split(out)

    def has_pending(self) -> bool:
        """Whether any submission waits for the controller (one probe of an index)."""
        return bool(self._q("SELECT 1 FROM jobs WHERE state = 'PENDING' LIMIT 1"))

    def tenant_ids(self) -> list[str]:
        """Every tenant's id, oldest first (no row is parsed)."""
        return [r[0] for r in self._q("SELECT id FROM tenants ORDER BY created_at, id")]

    def new_jobs(self, known: set[str] | None = None) -> list[Job]:
        """PENDING jobs (submitted since the controller last looked) that load."""
        return _loud(*self.load_new_jobs(known))

    def load_new_jobs(self, known: set[str] | None = None) -> tuple[list[Job], list[BadRow]]:
        """PENDING jobs not in ``known`` that load, and the rows that do not."""
        rows = self._q(f"SELECT {JOB_COLUMNS} FROM jobs WHERE state = ? ORDER BY seq",
                       (JobState.PENDING.value,))
        return _split(self._job_row(r) for r in rows if known is None or r[0] not in known)

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
                    "INSERT INTO nodes (id, state, job_id, intent_id, body) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (id) DO UPDATE SET "
                    "state = excluded.state, job_id = excluded.job_id, body = excluded.body",
                    [(n.id, n.state.value, n.job_id, n.intent_id, n.model_dump_json())
                     for n in nodes])
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

    # -- blobs and rate buckets: one statement each, outside the one-writer lock ---------------
    def put_blob(self, ns: str, key: str, data: bytes, *, grow: bool = False,
                 now: float | None = None) -> bool:
        """Keep ``data`` under (``ns``, ``key``) unless it holds something (``grow``: unless it
        holds as many bytes or more); True when written."""
        on_conflict = ("DO UPDATE SET size = excluded.size, data = excluded.data, at = excluded.at "
                       "WHERE blobs.size < excluded.size") if grow else "DO NOTHING"
        rows = self._backend.write_one(
            f"INSERT INTO blobs (ns, key, size, data, at) VALUES (?, ?, ?, ?, ?) "
            f"ON CONFLICT (ns, key) {on_conflict} RETURNING 1",
            (ns, key, len(data), data, time.time() if now is None else now))
        return bool(rows)

    def get_blob(self, ns: str, key: str) -> bytes | None:
        rows = self._q("SELECT data FROM blobs WHERE ns = ? AND key = ?", (ns, key))
        return bytes(rows[0][0]) if rows else None

    def blob_size(self, ns: str, key: str) -> int | None:
        rows = self._q("SELECT size FROM blobs WHERE ns = ? AND key = ?", (ns, key))
        return int(rows[0][0]) if rows else None

    def take_token(self, key: str, rate: float, burst: float, now: float) -> float:
        """Take one token from the shared bucket ``key`` (``rate`` a second up to ``burst``,
        refilled by ``tokens' = min(burst, tokens + rate * (now - at))``): 0.0 when allowed,
        else the seconds until one is there. One upsert: the row's lock orders the replicas."""
        least, greatest = self._sql.least, self._sql.greatest
        refill = f"{least}(?, b.tokens + {greatest}(0.0, ? - b.at) * ?)"
        rows = self._backend.write_one(
            f"INSERT INTO rate_buckets AS b (key, tokens, at, ok) VALUES (?, ?, ?, 1) "
            f"ON CONFLICT (key) DO UPDATE SET "
            f"tokens = CASE WHEN {refill} >= 1.0 THEN {refill} - 1.0 ELSE {refill} END, "
            f"ok = CASE WHEN {refill} >= 1.0 THEN 1 ELSE 0 END, "
            f"at = {greatest}(b.at, ?) RETURNING tokens, ok",
            (key, burst - 1.0, now, *([burst, now, rate] * 4), now))
        tokens, ok = rows[0]
        return 0.0 if ok else (1.0 - float(tokens)) / rate
