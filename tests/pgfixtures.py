"""A real PostgreSQL server for the store's tests: the ``pgserver`` package's binaries, one
server per session in a temporary directory, one fresh database per test.

A server that cannot start fails every PostgreSQL test under CI (``CI`` set true, as CI
services set it): the PostgreSQL half of the suite must not pass there by being skipped.
Elsewhere those tests skip, and the reason is printed (a warning in pytest's summary, besides
the skip's own line).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

BACKENDS = ("sqlite", "postgresql")


def under_ci() -> bool:
    """Whether this run is CI's (``CI`` set to true, 1 or yes)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def cannot_start(reason: str) -> NoReturn:
    """No server: under CI the test fails; elsewhere it skips, with the reason printed."""
    if under_ci():
        pytest.fail(f"PostgreSQL tests cannot run under CI: {reason}", pytrace=False)
    warnings.warn(f"the PostgreSQL tests are skipped: {reason}", pytest.PytestWarning,
                  stacklevel=2)
    pytest.skip(reason)


def start_server(root: Path) -> Any:
    """pgserver's PostgreSQL in ``root``, stopped by ``cleanup()``; see :func:`cannot_start`
    for what happens when it cannot start."""
    try:
        import pgserver
    except ImportError as exc:
        cannot_start(f"the pgserver package is not installed ({exc}); `make test` installs "
                     "it from pyproject.toml's test extras")
    try:
        return pgserver.get_server(root, cleanup_mode="stop")
    except Exception as exc:  # noqa: BLE001 - any failure to start is stated, then fails or skips
        cannot_start(f"pgserver could not start PostgreSQL in {root}: {exc}")


def database_url(server: Any, name: str) -> str:
    """The URL of database ``name`` on ``server`` (over its Unix socket)."""
    url: str = server.get_uri(name)
    return url


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """One server for the session. Its data lives in a directory of its own under /tmp, not in
    pytest's: as root, pgserver runs PostgreSQL as its own user, and every pytest session on the
    machine resets pytest's shared temporary root to mode 0700, which would lock that user out."""
    root = Path(tempfile.mkdtemp(prefix="spotplane-pg-"))
    try:
        server = start_server(root / "data")
        yield server
        server.cleanup()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def fresh_database(server: Any) -> Iterator[str]:
    """A new, empty database on ``server`` (its URL), dropped afterwards however it is held."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(database_url(server, "postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield database_url(server, name)
    finally:
        with psycopg.connect(database_url(server, "postgres"), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def pg_url(pg_server: Any) -> Iterator[str]:
    """A fresh, empty database on the session's server; dropped after the test."""
    with fresh_database(pg_server) as url:
        yield url


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a test's store lives, once per backend: a SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "state.db")
    url: str = request.getfixturevalue("pg_url")
    return url
