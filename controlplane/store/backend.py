"""Connections of the store: one SQLite connection, or a pool of PostgreSQL connections.

Both give the same three things: :meth:`Backend.query` (an autocommitted read), :meth:`Backend.tx`
(one write transaction) and :meth:`Backend.scan` (rows until the caller has enough). Write
transactions are serialized on both: SQLite's ``BEGIN IMMEDIATE`` takes the database's one write
lock; on PostgreSQL every write transaction first takes one transaction-scoped advisory lock, so
the controller's lease and fenced commits, the idempotency keys' check-then-insert and the
counters keep exactly the semantics they have on SQLite, across any number of processes.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from controlplane.core.counters import STORE_TX_BUCKETS, Buckets
from controlplane.core.errors import SpotplaneError
from controlplane.store.dialect import POSTGRES, SQLITE, Dialect, redact

Row = tuple[Any, ...]
WRITE_LOCK_KEY = 0x5370_6F74  # pg_advisory_xact_lock key of the store's one writer at a time
CONNECT_WAIT_S = 15.0  # how long opening a PostgreSQL store waits for its first connection


class Cursor(Protocol):
    """What a statement run inside a transaction returns (sqlite3's and psycopg's cursors)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Tx(ABC):
    """One open write transaction."""

    @abstractmethod
    def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor:
        """Run one statement (``?`` placeholders)."""

    @abstractmethod
    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement once per row of arguments."""

    @abstractmethod
    def script(self, sql: str) -> None:
        """Run several statements without arguments (DDL)."""

    def insert_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """``INSERT ... VALUES (?, ...)`` once per row (a backend may send fewer statements)."""
        self.executemany(sql, rows)

    def update_many(self, table: str, key: str, columns: Sequence[str],
                    rows: Sequence[Sequence[Any]]) -> None:
        """Set ``columns`` of the row whose ``key`` is each row's last value."""
        sets = ", ".join(f"{c} = ?" for c in columns)
        self.executemany(f"UPDATE {table} SET {sets} WHERE {key} = ?", rows)


class Backend(ABC):
    """A database the store reads and writes: its dialect and its connections."""

    dialect: Dialect

    def __init__(self) -> None:
        self.tx_seconds = Buckets(STORE_TX_BUCKETS)  # this process's write transactions

    @abstractmethod
    def query(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        """Every row of one read."""

    @abstractmethod
    def scan(self, sql: str, args: Sequence[Any], stop: Callable[[Row], bool]) -> list[Row]:
        """Rows of one read up to and including the first for which ``stop`` is true."""

    @abstractmethod
    def write_one(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        """One statement in a transaction of its own, outside the store's one-writer lock on
        PostgreSQL (its row locks suffice); returns the rows it returns."""

    @abstractmethod
    def tx(self) -> Any:
        """A context manager: one write transaction (a :class:`Tx`), committed on success."""

    @abstractmethod
    def close(self) -> None:
        """Release the connections."""

    def _timed(self, t0: float) -> None:
        self.tx_seconds.add(time.perf_counter() - t0)


class SQLiteTx(Tx):
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor:
        return self.db.execute(sql, args)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.db.executemany(sql, rows)

    def script(self, sql: str) -> None:
        for statement in split_sqlite(sql):
            self.db.execute(statement)


def split_sqlite(script: str) -> list[str]:
    """The complete statements of a SQLite script (a trigger's body keeps its semicolons)."""
    out: list[str] = []
    buf = ""
    for piece in script.split(";"):
        buf += piece + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \n;"):
                out.append(buf.strip())
            buf = ""
    return out


_WRITERS: dict[str, threading.RLock] = {}
_WRITERS_LOCK = threading.Lock()


def sqlite_writer(path: str) -> threading.RLock:
    """One lock per database file in this process: its connections queue for the write lock
    here instead of in SQLite's busy handler, which sleeps 1-100 ms between tries."""
    if path == ":memory:":
        return threading.RLock()  # each in-memory connection is a database of its own
    with _WRITERS_LOCK:
        return _WRITERS.setdefault(str(Path(path).resolve()), threading.RLock())


class SQLiteBackend(Backend):
    """One SQLite connection in WAL mode, shared by the threads of one process under a lock
    (a process may open several: their writes queue on :func:`sqlite_writer`)."""

    dialect = SQLITE

    def __init__(self, path: str, timeout_s: float) -> None:
        super().__init__()
        self.lock = threading.RLock()
        self.write = sqlite_writer(path)
        self.db = sqlite3.connect(path, timeout=timeout_s, isolation_level=None,
                                  check_same_thread=False)
        self.db.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        with self.lock:
            return self.db.execute(sql, args).fetchall()

    def scan(self, sql: str, args: Sequence[Any], stop: Callable[[Row], bool]) -> list[Row]:
        out: list[Row] = []
        with self.lock:
            for row in self.db.execute(sql, args):
                out.append(row)
                if stop(row):
                    break
        return out

    def write_one(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        with self.write, self.lock:
            return self.db.execute(sql, args).fetchall()

    @contextmanager
    def tx(self) -> Iterator[Tx]:
        with self.write, self.lock:
            t0 = time.perf_counter()
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield SQLiteTx(self.db)
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
            self._timed(t0)

    def close(self) -> None:
        with self.lock:
            self.db.close()


def pg_sql(sql: str) -> str:
    """The store's ``?`` placeholders as psycopg's ``%s``."""
    return sql.replace("?", "%s")


class PostgresTx(Tx):
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor:
        cursor: Cursor = self.conn.execute(pg_sql(sql), args)
        return cursor

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany(pg_sql(sql), rows)

    def script(self, sql: str) -> None:
        self.conn.execute(sql)  # no arguments: psycopg sends the statements as one simple query

    # One statement for many rows: the job_totals triggers run once per statement, not per row.
    def insert_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        head, group = sql.split(" VALUES ")
        for part in chunks(rows):
            self.execute(f"{head} VALUES {', '.join([group] * len(part))}",
                         [v for row in part for v in row])

    def update_many(self, table: str, key: str, columns: Sequence[str],
                    rows: Sequence[Sequence[Any]]) -> None:
        last = list({row[-1]: row for row in rows}.values())  # a key twice: its last row, as
        names = ", ".join([*columns, key])                   # statement by statement
        sets = ", ".join(f"{c} = v.{c}" for c in columns)
        for part in chunks(last):
            values = ", ".join(["(" + ", ".join("?" * len(part[0])) + ")"] * len(part))
            self.execute(f"UPDATE {table} SET {sets} FROM (VALUES {values}) AS v ({names}) "
                         f"WHERE {table}.{key} = v.{key}", [v for row in part for v in row])


def chunks(rows: Sequence[Sequence[Any]], max_args: int = 30_000) -> Iterator[Sequence[Sequence[Any]]]:
    """``rows`` in parts of at most ``max_args`` arguments (PostgreSQL takes 65,535 a statement)."""
    if not rows:
        return
    step = max(1, max_args // max(1, len(rows[0])))
    for i in range(0, len(rows), step):
        yield rows[i:i + step]


class PostgresBackend(Backend):
    """A psycopg connection pool; reads autocommit, writes take the store's advisory lock."""

    dialect = POSTGRES

    def __init__(self, url: str, timeout_s: float, max_size: int = 4) -> None:
        super().__init__()
        from psycopg_pool import ConnectionPool  # third-party: loads only for PostgreSQL

        self.url = url
        # a writer waits for the write lock as long as SQLite's busy timeout lets it
        session = {"autocommit": True, "options": f"-c lock_timeout={int(timeout_s * 1000)}"}
        self.pool = ConnectionPool(url, min_size=1, max_size=max_size, timeout=timeout_s,
                                   kwargs=session, open=False, name="spotplane-store")
        self.pool.open()
        try:
            self.pool.wait(timeout=min(timeout_s, CONNECT_WAIT_S))
        except Exception as exc:
            self.pool.close()
            raise SpotplaneError(f"cannot connect to PostgreSQL at {redact(url)} ({exc})",
                                 fix="check the server runs and the URL's user, password and "
                                     "database (spotplane up --db / SPOTPLANE_DB)") from exc

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        with self.pool.connection() as conn:
            rows: list[Row] = conn.execute(pg_sql(sql), args).fetchall()
            return rows

    def scan(self, sql: str, args: Sequence[Any], stop: Callable[[Row], bool]) -> list[Row]:
        out: list[Row] = []
        with self.pool.connection() as conn, conn.cursor() as cur:
            cur.execute(pg_sql(sql), args)
            while batch := cur.fetchmany(100):
                for row in batch:
                    out.append(row)
                    if stop(row):
                        return out
        return out

    def write_one(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        with self.pool.connection() as conn:  # autocommit: the statement is its transaction
            cur = conn.execute(pg_sql(sql), args)
            return cur.fetchall() if cur.description is not None else []

    @contextmanager
    def tx(self) -> Iterator[Tx]:
        with self.pool.connection() as conn:
            t0 = time.perf_counter()
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK_KEY,))
                yield PostgresTx(conn)
            self._timed(t0)

    def close(self) -> None:
        self.pool.close()
