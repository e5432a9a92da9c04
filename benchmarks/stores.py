"""The store a benchmark runs on, named by its ``--db`` option."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def store_at(db: str) -> Iterator[str]:
    """The store's target for ``--db``: a fresh SQLite file (``sqlite``), a throwaway PostgreSQL
    from the ``pgserver`` package (``pgserver``), or an empty PostgreSQL's URL as given."""
    if db not in ("sqlite", "pgserver"):
        yield db
        return
    with tempfile.TemporaryDirectory(prefix="spotplane-bench-store-") as tmp:
        if db == "sqlite":
            yield str(Path(tmp) / "spotplane.db")
            return
        import pgserver  # third-party: the test extras' server, only for --db pgserver

        server = pgserver.get_server(Path(tmp) / "pg", cleanup_mode="stop")
        try:
            yield str(server.get_uri())
        finally:
            server.cleanup()
