"""Blobs (``controlplane.core.blobs``) in the store's ``blobs`` table: what every API replica
and the executor read and write from any Ray node, with no disk shared between them."""

from __future__ import annotations

from pathlib import Path

from clusters.blobs import DirBlobs
from controlplane.core.blobs import Blobs, check_key
from controlplane.store.dialect import redact, sqlite_path
from controlplane.store.store import Store

IN_STORE = "store"  # a package_dir / log_dir that means "in the store's blobs table"
PACKAGES, LOGS = "packages", "logs"  # the namespaces of uploaded packages and archived logs


class StoreBlobs:
    """The blobs of one namespace (``packages``, ``logs``) of ``store``."""

    def __init__(self, store: Store, ns: str) -> None:
        self.store = store
        self.ns = check_key(ns)
        self.where = f"{redact(store.url)} (table blobs, {ns})"

    def put(self, key: str, data: bytes) -> bool:
        return self.store.put_blob(self.ns, check_key(key), data)

    def grow(self, key: str, data: bytes) -> bool:
        return self.store.put_blob(self.ns, check_key(key), data, grow=True)

    def get(self, key: str) -> bytes | None:
        return self.store.get_blob(self.ns, check_key(key))

    def size(self, key: str) -> int | None:
        return self.store.blob_size(self.ns, check_key(key))


def open_blobs(spec: str | Path | None, store: Store, ns: str) -> Blobs:
    """Where the blobs of ``ns`` live: ``spec`` a directory, or :data:`IN_STORE`; by default
    the store's table for a PostgreSQL store (no disk beside it that every node shares) and the
    directory ``<ns>/`` beside a SQLite file (the embedded default)."""
    if spec is None and store.backend == "postgresql":
        spec = IN_STORE
    if spec is None:
        spec = Path(sqlite_path(store.url)).parent / ns
    if str(spec) == IN_STORE:
        return StoreBlobs(store, ns)
    return DirBlobs(spec)
