"""Named byte strings shared by every process of the control plane: uploaded code packages
and the executor's copies of attempts' logs.

One interface, two homes: a directory (the embedded default, ``clusters.blobs.DirBlobs``) or
the store's ``blobs`` table (``controlplane.store.blobs.StoreBlobs``), which every API replica
and the controller reach from any Ray node without a shared disk. A key is a ``/``-joined path
of plain names (``<tenant id>/<package name>``, ``<job id>/<submission id>.log``).
"""

from __future__ import annotations

import re
from typing import Protocol, runtime_checkable

from controlplane.core.errors import InvalidInput

_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,254}$")


@runtime_checkable
class Blobs(Protocol):
    """Byte strings by key: written once (:meth:`put`) or only ever grown (:meth:`grow`)."""

    where: str  # for messages: a directory, or the store's redacted URL

    def put(self, key: str, data: bytes) -> bool:
        """Keep ``data`` under ``key`` unless the key holds something; True when written."""
        ...

    def grow(self, key: str, data: bytes) -> bool:
        """Keep ``data`` under ``key`` unless the key holds as many bytes or more."""
        ...

    def get(self, key: str) -> bytes | None:
        """The bytes under ``key``, or None."""
        ...

    def size(self, key: str) -> int | None:
        """How many bytes ``key`` holds, or None when it holds nothing."""
        ...


def check_key(key: str) -> str:
    """``key`` when every ``/``-separated part is a plain name (no ``..``, no leading dot)."""
    if not key or not all(_PART.match(p) for p in key.split("/")):
        raise InvalidInput("key", f"{key!r} is not a blob key",
                           fix="join plain names (letters, digits, '._-') with '/'")
    return key
