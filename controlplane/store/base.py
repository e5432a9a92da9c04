"""The store's handle on its database (:class:`StoreBase`): opening and the schema, the
transaction and query plumbing, meta keys, the control-plane clock and the controller lease."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from controlplane.core.counters import Buckets
from controlplane.core.errors import Conflict, InvalidInput, UnknownReference
from controlplane.store.backend import PostgresBackend, Tx
from controlplane.store.dialect import redact, sqlite_path
from controlplane.store.rows import (
    INT_IDS,
    LEASE_SQL,
    open_backend,
    replace_sql,
)
from controlplane.store.schema import ensure_schema

NODE_REPORT_PREFIX = "node_report:"  # meta keys: node_report:<kind>:<instance id>


class StoreBase:
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
        An ``after`` that is no id of the list is an :class:`UnknownReference` naming ``after``."""
        conds, args = list(scope), list(scope_args)
        if after is not None:
            numeric = table in INT_IDS
            key: Any = int(after) if numeric and after.isdigit() and len(after) < 19 else after
            where = " AND ".join(["id = ?", *scope])
            found = (self._q(f"SELECT {order} FROM {table} WHERE {where}", [key, *scope_args])
                     if not numeric or isinstance(key, int) else [])
            if not found:
                raise UnknownReference("after", f"{after!r} is not an id of this list",
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

    # -- nodes' own reports (a notice, a failed boot), kept until the controller takes them -----
    def put_node_report(self, instance_id: str, kind: str, body: dict[str, Any]) -> None:
        """Keep a node's report for the controller (one per instance and kind; a newer replaces)."""
        self.set_meta(f"{NODE_REPORT_PREFIX}{kind}:{instance_id}", json.dumps(body, sort_keys=True))

    def take_node_reports(self) -> list[tuple[str, str, dict[str, Any]]]:
        """Every kept report as (kind, instance id, body), removed as it is taken (a report
        replaced meanwhile stays for the next take)."""
        rows = self._q("SELECT key, value FROM meta WHERE key LIKE ?", (f"{NODE_REPORT_PREFIX}%",))
        if not rows:
            return []
        with self._tx() as db:
            db.executemany("DELETE FROM meta WHERE key = ? AND value = ?", [tuple(r) for r in rows])
        out = []
        for key, value in rows:
            kind, _, instance_id = str(key).removeprefix(NODE_REPORT_PREFIX).partition(":")
            out.append((kind, instance_id, json.loads(value)))
        return out

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

