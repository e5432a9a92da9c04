"""The durable store of the control plane (floor 3): one contract, two backends.

``Store(target)`` opens SQLite for a path or ``sqlite:///PATH`` (the embedded default) and
PostgreSQL for a ``postgresql://`` URL; both keep one versioned schema
(``controlplane.store.schema``) and the same transactions, lease, intents and events.
"""

from controlplane.store.blobs import IN_STORE, LOGS, PACKAGES, StoreBlobs, open_blobs
from controlplane.store.dialect import is_postgres, redact, sqlite_path
from controlplane.store.rows import (
    IDEMPOTENCY_TTL_S,
    INTENT_DONE,
    INTENT_FAILED,
    INTENT_PENDING,
    JOB_ORDER,
    BadRow,
    IdempotentCall,
    Intent,
    StoredAnswer,
    load_error,
    private_file,
)
from controlplane.store.schema import SCHEMA_VERSION, SchemaTooNew
from controlplane.store.store import Store

__all__ = [
    "IDEMPOTENCY_TTL_S", "INTENT_DONE", "IN_STORE", "LOGS", "PACKAGES", "StoreBlobs",
    "open_blobs", "INTENT_FAILED", "INTENT_PENDING", "JOB_ORDER",
    "SCHEMA_VERSION", "BadRow", "IdempotentCall", "Intent", "SchemaTooNew", "Store",
    "StoredAnswer", "is_postgres", "load_error", "private_file", "redact", "sqlite_path",
]
