"""What every section of the store shares: row layouts, SQL fragments, intents, idempotent
answers, rows that do not load (:class:`BadRow`), and the small helpers that read them."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from controlplane.core.models import (
    Bag,
    Job,
    JobState,
    NodeState,
)
from controlplane.store.backend import Backend, PostgresBackend, SQLiteBackend
from controlplane.store.dialect import Dialect, is_postgres, sqlite_path

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


def job_from_row(r: tuple[Any, ...]) -> Job | BadRow:
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
    job.mark_saved()  # as the store holds it (the cancel flag is its own column)
    return job


LIVE_NODE_STATES = [s.value for s in NodeState
                    if s not in (NodeState.TERMINATED, NodeState.PREEMPTED, NodeState.FAILED)]


def limit_clause(limit: int | None) -> str:
    """`` LIMIT n`` (a checked int, inlined) or nothing."""
    return "" if limit is None else f" LIMIT {int(limit)}"


def state_values(state: JobState | str | Iterable[JobState | str] | None) -> list[str] | None:
    if state is None:
        return None
    if isinstance(state, str):
        return [JobState(state).value]
    return [JobState(s).value for s in state]


def split_bad(found: Iterable[Any]) -> tuple[list[Any], list[BadRow]]:
    """Loaded models and the rows that did not load, apart."""
    good: list[Any] = []
    bad: list[BadRow] = []
    for f in found:
        (bad if isinstance(f, BadRow) else good).append(f)
    return good, bad


def log_bad(good: list[Any], bad: list[BadRow]) -> list[Any]:
    """The loaded models; each row that did not load is logged (never dropped silently)."""
    for b in bad:
        log.error("stored %s (left out; the controller quarantines it)", b.describe())
    return good
