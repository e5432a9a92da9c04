"""What differs between the store's two SQL dialects, and which backend a store URL names.

The store writes its SQL once, with ``?`` placeholders and the ``INSERT ... ON CONFLICT``
upserts both engines share; a :class:`Dialect` supplies the few expressions that differ (JSON
paths, case-insensitive LIKE) and the PostgreSQL backend turns ``?`` into ``%s``.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from controlplane.core.errors import InvalidInput

POSTGRES_SCHEMES = ("postgresql", "postgres")
SQLITE_PREFIX = "sqlite:///"


@dataclass(frozen=True)
class Dialect:
    """The SQL that differs between the backends (SQLite's by default)."""

    name: str = "sqlite"
    like: str = "LIKE"  # SQLite's LIKE already ignores ASCII case
    least: str = "MIN"  # the smaller of several values (SQLite's MIN takes many arguments)
    greatest: str = "MAX"
    # the database's own clock in Unix seconds: one clock for every process sharing the store
    now: str = "SELECT (julianday('now') - 2440587.5) * 86400.0"

    def json(self, column: str, path: str, *, number: bool = False) -> str:
        """The value at ``path`` (dotted, e.g. ``spec.compute_hours``) of a JSON text column."""
        return f"json_extract({column}, '$.{path}')"

    def integrity_errors(self) -> tuple[type[Exception], ...]:
        """The exceptions a violated UNIQUE or PRIMARY KEY constraint raises."""
        return (sqlite3.IntegrityError,)


@dataclass(frozen=True)
class PostgresDialect(Dialect):
    """PostgreSQL's spelling: ``jsonb`` path operators, ``ILIKE``."""

    name: str = "postgresql"
    like: str = "ILIKE"
    least: str = "LEAST"
    greatest: str = "GREATEST"
    now: str = "SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8"

    def json(self, column: str, path: str, *, number: bool = False) -> str:
        text = f"({column}::jsonb #>> '{{{','.join(path.split('.'))}}}')"
        return f"({text}::float8)" if number else text

    def integrity_errors(self) -> tuple[type[Exception], ...]:
        import psycopg  # a third-party import: the driver loads only when PostgreSQL is used

        return (psycopg.errors.IntegrityError,)


SQLITE = Dialect()
POSTGRES = PostgresDialect()


def is_postgres(target: str | Path) -> bool:
    """Whether ``target`` names a PostgreSQL database (``postgresql://...``)."""
    return isinstance(target, str) and urlsplit(target).scheme in POSTGRES_SCHEMES


def sqlite_path(target: str | Path) -> str:
    """The file (or ``:memory:``) of a SQLite target: a path, or ``sqlite:///path``."""
    text = str(target)
    if text.startswith(SQLITE_PREFIX):
        text = text[len(SQLITE_PREFIX):]
    elif "://" in text:
        raise InvalidInput("db", f"{redact(text)!r} is neither a path nor a known database URL",
                           fix="use a file path, sqlite:///PATH or postgresql://USER@HOST/DB")
    if not text:
        raise InvalidInput("db", "the SQLite path is empty", fix="sqlite:///PATH")
    return text


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
