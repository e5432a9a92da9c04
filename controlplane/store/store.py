"""The durable state of the control plane: one SQLite file in WAL mode (the embedded default) or
one PostgreSQL database, chosen by the target :class:`Store` is opened with (a path, or a URL).

Safe for concurrent use by several processes (the Serve replicas insert submissions and set
cancel flags while the controller reconciles): every process opens its own :class:`Store`;
writes run one at a time (SQLite's ``BEGIN IMMEDIATE``, PostgreSQL's advisory lock:
``controlplane.store.backend``). Ownership of columns
keeps writers from stepping on each other: the API only INSERTs jobs/tenants/bags and sets
``jobs.cancel_requested``; the controller owns every other job/node column.

Intents: the controller writes an intent (launch, terminate, preempt) *before* acting and marks it
done after; a crash in between leaves a pending intent that the next tick re-applies, and the
fleet's launch is idempotent on the intent id, so no node is launched twice and no job is lost.
"""

from __future__ import annotations

from controlplane.store.clusters import ClusterRows
from controlplane.store.commits import ControllerRows
from controlplane.store.shared import SharedRows


class Store(ControllerRows, SharedRows, ClusterRows):
    """One process's handle on the spotplane database: a SQLite connection shared by its
    threads under a lock, or a pool of PostgreSQL connections (``controlplane.store.backend``).

    Each section lives in a module of its own over the plumbing of
    :class:`controlplane.store.base.StoreBase`: ``tenants``, ``jobs`` (jobs and bags, over the
    tenants), ``views`` (fleet, cost, quotas, metrics), ``commits`` (the controller's reads and
    its one commit a tick, over jobs and views) and ``shared`` (blobs, rate buckets), ``clusters`` (the workload clusters' registry)."""
