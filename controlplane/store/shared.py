"""What the API replicas share through the store outside the one-writer lock: blobs and
rate-limit buckets, one statement each."""

from __future__ import annotations

import time

from controlplane.store.base import StoreBase


class SharedRows(StoreBase):
    """Blobs and rate buckets."""

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

