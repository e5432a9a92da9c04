"""Blobs (``controlplane.core.blobs``) in a local directory: ``<root>/<key>``, each written
atomically. The embedded default: every reader and writer shares this machine's disk."""

from __future__ import annotations

from pathlib import Path

from clusters.fetch import write_atomic
from controlplane.core.blobs import check_key


class DirBlobs:
    """Blobs as files under ``root``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.where = str(self.root)

    def path(self, key: str) -> Path:
        return self.root / check_key(key)

    def put(self, key: str, data: bytes) -> bool:
        path = self.path(key)
        if path.is_file():
            return False
        write_atomic(path, data)
        return True

    def grow(self, key: str, data: bytes) -> bool:
        path = self.path(key)
        if path.is_file() and path.stat().st_size >= len(data):
            return False
        write_atomic(path, data)
        return True

    def get(self, key: str) -> bytes | None:
        path = self.path(key)
        return path.read_bytes() if path.is_file() else None

    def size(self, key: str) -> int | None:
        path = self.path(key)
        return path.stat().st_size if path.is_file() else None
