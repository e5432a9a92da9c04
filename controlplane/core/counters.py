"""What the reconcile loop counts: the controller's metric families and their counters-table rows.

The controller runs in a Ray actor, the API in a Serve replica, so controller metrics cannot live
in one process's memory. The loop adds them to its tick's ``counters`` dict (keys from
:func:`counter_key` and :func:`observe`), which the store commits in the same transaction as the
tick's events: a count never disagrees with the events it counts and survives a restart.
``serve.metrics`` turns those rows back into Prometheus counters and histograms at scrape time.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from controlplane.core.models import Job, Node

PREFIX = "spotplane_"

TICK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
STORE_TX_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
CHECKPOINT_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
SLACK_BUCKETS = (0.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0)


@dataclass(frozen=True)
class Family:
    """One controller family: its type, help text, label names and (histograms) buckets."""

    kind: str  # "counter" | "histogram"
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()


# Controller families, by name without the prefix (counters keep their ``_total``).
CONTROLLER: dict[str, Family] = {
    "reconcile_tick_duration_seconds": Family(
        "histogram", "Wall time of one reconcile tick, per phase (phase=total: the whole tick).",
        ("phase",), TICK_BUCKETS),
    "placements_total": Family(
        "counter", "Jobs placed on nodes, by the zone's cloud, zone, market and job kind.",
        ("cloud", "zone", "market", "kind")),
    "evictions_total": Family(
        "counter", "Running jobs the controller took nodes from, by where they ran and cause.",
        ("cloud", "zone", "market", "cause")),
    "preemptions_total": Family(
        "counter", "Jobs that lost a worker and went back to the queue, by where they ran and "
        "cause (preempted, failed, terminated, launch_refused, eviction, gang_incomplete).",
        ("cloud", "zone", "market", "cause")),
    "node_preemptions_total": Family(
        "counter", "Nodes the cloud preempted, by cloud, zone and market.",
        ("cloud", "zone", "market")),
    "zone_probes_total": Family(
        "counter", "Spot availability probes a deadline policy bought (zone_observation: "
        "evidence), by provider and zone.", ("provider", "zone")),
    "zone_probe_cost_dollars_total": Family(
        "counter", "What those probes cost: probe_minutes of one spot node each, by provider.",
        ("provider",)),
    "launches_total": Family(
        "counter", "Launch requests the provider accepted, by provider and market.",
        ("provider", "market")),
    "launched_nodes_total": Family(
        "counter", "Nodes the provider launched, by provider and market.",
        ("provider", "market")),
    "launch_failures_total": Family(
        "counter", "Launch requests the provider refused, by provider and error kind.",
        ("provider", "error")),
    "deadline_decisions_total": Family(
        "counter", "Deadline-policy decisions that changed a job's action, by policy and action.",
        ("policy", "action")),
    "deadline_slack_at_finish_seconds": Family(
        "histogram", "Control-plane seconds left before the deadline when a deadline job "
        "finished in time.", (), SLACK_BUCKETS),
    "deadline_misses_total": Family(
        "counter", "Deadline jobs that finished after their deadline."),
    "deadline_lateness_seconds": Family(
        "histogram", "Control-plane seconds past the deadline when a deadline job finished "
        "late.", (), SLACK_BUCKETS),
    "checkpoint_writes_total": Family(
        "counter", "Checkpoints written, by source (simulated workload or executor).",
        ("source",)),
    "checkpoint_bytes_total": Family(
        "counter", "Bytes of executor jobs' checkpoints in the artifact store (the simulated "
        "workload writes none)."),
    "checkpoint_duration_seconds": Family(
        "histogram", "Control-plane seconds one checkpoint write of the simulated workload "
        "took.", (), CHECKPOINT_BUCKETS),
    "checkpoint_restore_fallbacks_total": Family(
        "counter", "Restores that skipped a corrupt or missing newer checkpoint (executor jobs)."),
    "tenant_month_spend_dollars_total": Family(
        "counter", "Dollars each tenant spent in each UTC calendar month (its budget's spend), "
        "by tenant and month.", ("tenant", "month")),
    "budget_events_total": Family(
        "counter", "Budget lines a tenant crossed (soft or hard, hourly or monthly).",
        ("tenant", "limit", "level")),
    "store_transaction_seconds": Family(
        "histogram", "Wall time of one store write transaction in the controller process.",
        (), STORE_TX_BUCKETS),
}


# --------------------------------------------------------------------------------------------
# What the controller records: rows of the store's counters table
# --------------------------------------------------------------------------------------------
def counter_key(name: str, **labels: str) -> str:
    """The counters-table key of one labelled sample: ``name{"label": "value", ...}``."""
    return name + (json.dumps(labels, sort_keys=True) if labels else "")


def parse_key(key: str) -> tuple[str, dict[str, str]]:
    """Inverse of :func:`counter_key` (plain names have no labels)."""
    name, brace, rest = key.partition("{")
    return name, (json.loads(brace + rest) if brace else {})


def count(counters: dict[str, float], name: str, by: float = 1.0, /, **labels: str) -> None:
    """Add ``by`` to one labelled controller counter."""
    key = counter_key(name, **labels)
    counters[key] = counters.get(key, 0.0) + by


def observe(counters: dict[str, float], name: str, value: float, **labels: str) -> None:
    """One observation of a controller histogram: its bucket's count, the sum and the count."""
    buckets = CONTROLLER[name].buckets
    le = next((b for b in buckets if value <= b), math.inf)
    count(counters, f"{name}:bucket", 1.0, le=le_label(le), **labels)
    count(counters, f"{name}:sum", value, **labels)
    count(counters, f"{name}:count", 1.0, **labels)


def job_where(job: Job, nodes: dict[str, Node]) -> dict[str, str]:
    """Cloud, zone and market labels of where a job runs (its first node's)."""
    node = next((nodes[i] for i in job.node_ids if i in nodes), None)
    market = job.market.value if job.market is not None else (node.market.value if node else "")
    return {"cloud": node.cloud if node else "", "zone": job.zone or (node.zone if node else ""),
            "market": market}


def le_label(b: float) -> str:
    """A bucket bound as Prometheus writes ``le`` (``+Inf`` for the last)."""
    return "+Inf" if math.isinf(b) else repr(float(b))


@dataclass
class Buckets:
    """Cumulative histogram state kept in one process (a store's transaction latency)."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # per bucket, not cumulative; last: +Inf
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def add(self, value: float) -> None:
        i = next((i for i, b in enumerate(self.bounds) if value <= b), len(self.bounds))
        self.counts[i] += 1
        self.total += value

    def copy(self) -> Buckets:
        return Buckets(self.bounds, list(self.counts), self.total)

    def since(self, earlier: Buckets | None) -> Buckets:
        """What was added after ``earlier`` (a copy taken before)."""
        if earlier is None:
            return self.copy()
        return Buckets(self.bounds, [a - b for a, b in zip(self.counts, earlier.counts,
                                                               strict=True)],
                       self.total - earlier.total)

    def record(self, counters: dict[str, float], name: str) -> None:
        """Add these observations to a controller histogram's counter rows."""
        for b, n in zip((*self.bounds, math.inf), self.counts, strict=True):
            if n:
                count(counters, f"{name}:bucket", float(n), le=le_label(b))
        if sum(self.counts):
            count(counters, f"{name}:sum", self.total)
            count(counters, f"{name}:count", float(sum(self.counts)))
