"""The control plane's Prometheus exposition (``GET /metrics``), through ``prometheus_client``.

Where each number lives (the controller runs in a Ray actor, the API in a Serve replica):

* **Scrape-time families** (jobs, queues, nodes, spend, quotas, forecasts) are read from the
  durable store by :class:`StoreCollector` in the API process at each scrape: nothing to keep in
  memory, always what the store says, right after any restart.
* **Controller families** (tick phases, launches, placements, preemptions, evictions, deadline
  decisions, checkpoints, store transaction latency) are known only inside the reconcile loop.
  The controller adds them to its tick's counters (:mod:`controlplane.core.counters`), which the
  store commits with the tick's events; the collector turns those rows back into counters and
  histograms.
* **API families** (requests by route and status, their latency) are per replica: real
  ``prometheus_client`` metrics in the replica's :class:`ApiMetrics`, like any HTTP server's.

Every family lives in one :class:`~prometheus_client.CollectorRegistry` made by
:func:`build_registry` (never the process-global default). ``/metrics`` is operator-only: it
carries every tenant's spend by tenant name.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from controlplane.core.counters import CONTROLLER, PREFIX, Family, le_label, parse_key
from controlplane.core.workloadclusters import ClusterState, WorkloadCluster
from controlplane.reconcile.fairshare import META_KEY as FAIR_SHARE_KEY
from controlplane.reconcile.fairshare import read_lines
from policies.budgets import Level, level, month_of

if TYPE_CHECKING:
    from controlplane.store import Store

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

API_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# --------------------------------------------------------------------------------------------
# What a scrape reads: the store, at scrape time
# --------------------------------------------------------------------------------------------
class StoreCollector(Collector):
    """Yields every store-derived and controller family from one store at each scrape."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def describe(self) -> list[Metric]:
        return []  # no store query at registration

    def collect(self) -> Iterator[Metric]:
        snap = self.store.metrics_snapshot()
        yield from _controller_families(snap["counters"])
        yield from _job_families(snap)
        yield from _node_families(snap["nodes"])
        yield from _cost_families(snap["cost"])
        yield from _pool_families(snap["quotas"], snap["allocators"])
        yield from _forecast_families(snap)
        yield from _budget_families(self.store, snap["control_time"])
        yield from _fair_share_families(self.store)
        yield from _cluster_families(self.store.list_clusters())
        t = GaugeMetricFamily(f"{PREFIX}control_time_seconds",
                              "Control-plane time of the controller's last tick.")
        t.add_metric([], snap["control_time"])
        yield t


def _controller_families(rows: dict[str, float]) -> Iterator[Metric]:
    samples: dict[str, list[tuple[dict[str, str], str, float]]] = {}
    legacy: dict[str, float] = {}
    for key, value in rows.items():
        name, labels = parse_key(key)
        base, _, part = name.partition(":")
        if base in CONTROLLER:
            samples.setdefault(base, []).append((labels, part, value))
        elif not labels and not part:
            legacy[name] = value
    for name, fam in CONTROLLER.items():
        got = samples.get(name, [])
        if fam.kind == "counter":
            yield _counter(name, fam, got)
        else:
            yield _histogram(name, fam, got)
    for name in sorted(legacy):
        full = name if name.endswith("_total") else f"{name}_total"
        c = CounterMetricFamily(f"{PREFIX}{full.removesuffix('_total')}",
                                f"Controller event counter {name} (unlabelled).")
        c.add_metric([], legacy[name])
        yield c


def _counter(name: str, fam: Family,
             got: Sequence[tuple[dict[str, str], str, float]]) -> CounterMetricFamily:
    c = CounterMetricFamily(f"{PREFIX}{name.removesuffix('_total')}", fam.help,
                            labels=list(fam.labels))
    if not fam.labels and not got:
        c.add_metric([], 0.0)
    for labels, _, value in sorted(got, key=lambda s: sorted(s[0].items())):
        c.add_metric([labels.get(k, "") for k in fam.labels], value)
    return c


def _histogram(name: str, fam: Family,
               got: Sequence[tuple[dict[str, str], str, float]]) -> HistogramMetricFamily:
    h = HistogramMetricFamily(f"{PREFIX}{name}", fam.help, labels=list(fam.labels))
    series: dict[tuple[str, ...], dict[str, Any]] = {}
    for labels, part, value in got:
        key = tuple(labels.get(k, "") for k in fam.labels)
        s = series.setdefault(key, {"buckets": {}, "sum": 0.0})
        if part == "bucket":
            s["buckets"][labels["le"]] = s["buckets"].get(labels["le"], 0.0) + value
        elif part == "sum":
            s["sum"] += value
    if not fam.labels and not series:
        series[()] = {"buckets": {}, "sum": 0.0}
    for key in sorted(series):
        s = series[key]
        running, cumulative = 0.0, []
        for b in (*fam.buckets, math.inf):
            running += s["buckets"].get(le_label(b), 0.0)
            cumulative.append((le_label(b), running))
        h.add_metric(list(key), cumulative, s["sum"])
    return h


def _gauge(name: str, help_text: str, labels: Sequence[str],
           rows: Iterable[tuple[Sequence[str], float]]) -> GaugeMetricFamily:
    g = GaugeMetricFamily(f"{PREFIX}{name}", help_text, labels=list(labels))
    for values, v in rows:
        g.add_metric(list(values), float(v))
    return g


def _cluster_families(clusters: Sequence[WorkloadCluster]) -> Iterator[Metric]:
    labels = ("cluster", "cloud", "region", "state")
    yield _gauge("workload_cluster_healthy", "1 when the workload cluster's job API answered and "
                 "its nodes were listed at the last check (active or draining), else 0.", labels,
                 [((c.name, c.cloud, c.region, c.state.value),
                   0.0 if c.state is ClusterState.UNHEALTHY else 1.0) for c in clusters])
    yield _gauge("workload_cluster_nodes", "Ray nodes alive in each workload cluster at the last "
                 "check.", ("cluster",), [((c.name,), c.nodes_alive) for c in clusters])


def _job_families(snap: dict[str, Any]) -> Iterator[Metric]:
    yield _gauge("jobs", "Jobs by state and kind.", ("state", "kind"),
                 (((s, k), n) for s, k, n in snap["jobs"]))
    queue = snap["queue"]
    yield _gauge("queue_depth", "QUEUED jobs by pool (accelerator asked for), kind and tenant.",
                 ("pool", "kind", "tenant"), ((k, v[0]) for k, v in sorted(queue.items())))
    yield _gauge("queue_oldest_wait_seconds",
                 "Control-plane seconds the longest-waiting QUEUED job has waited since it "
                 "last entered the queue, by pool, kind and tenant.",
                 ("pool", "kind", "tenant"), ((k, v[1]) for k, v in sorted(queue.items())))


def _node_families(rows: Sequence[tuple[tuple[str, ...], int]]) -> Iterator[Metric]:
    yield _gauge("nodes", "Live nodes by cloud, zone, market, accelerator and state.",
                 ("cloud", "zone", "market", "accelerator", "state"), rows)


def _cost_families(rows: Sequence[tuple[str, float, float, float]]) -> Iterator[Metric]:
    spend = CounterMetricFamily(f"{PREFIX}tenant_spend_dollars",
                                "Dollars spent on each tenant's jobs (operator-only).",
                                labels=["tenant"])
    od = CounterMetricFamily(f"{PREFIX}tenant_on_demand_counterfactual_dollars",
                             "What the same GPU hours would have cost on on-demand only, per "
                             "tenant (operator-only).", labels=["tenant"])
    gpu = CounterMetricFamily(f"{PREFIX}tenant_gpu_hours", "GPU hours billed per tenant.",
                              labels=["tenant"])
    for tenant, cost, on_demand, gpu_hours in rows:
        spend.add_metric([tenant], cost)
        od.add_metric([tenant], on_demand)
        gpu.add_metric([tenant], gpu_hours)
    yield from (spend, od, gpu)


def _budget_families(store: Store, now: float) -> Iterator[Metric]:
    """Each tenant with a budget: spend over each limit (the soft line's gauge) and the line
    reached (0 ok, 1 soft, 2 hard)."""
    budgets = store.budgets()
    spend = store.month_spend(month_of(now)) if budgets else {}
    rates = store.spend_rates() if budgets else {}
    used, lines = [], []
    for tenant, b in sorted(budgets.items()):
        for limit, value, cap in (("hourly", rates.get(tenant, 0.0), b.hourly_cap),
                                  ("monthly", spend.get(tenant, 0.0), b.monthly_budget)):
            if cap is None:
                continue
            used.append(((tenant, limit), value / cap))
            lines.append(((tenant, limit),
                          float(list(Level).index(level(value, cap, b.soft_fraction)))))
    yield _gauge("tenant_budget_used_ratio", "Each tenant's spend over its limit: spend rate "
                 "over hourly_cap, month spend over monthly_budget.", ("tenant", "limit"), used)
    yield _gauge("tenant_budget_level", "The line each tenant's spend reached per limit: 0 ok, "
                 "1 soft, 2 hard.", ("tenant", "limit"), lines)


def _pool_families(quotas: Sequence[Any], allocators: dict[str, Any]) -> Iterator[Metric]:
    pools = {q.accelerator: q.pool for q in quotas}
    labels = ("pool", "accelerator")
    yield _gauge("pool_capacity_gpus", "GPUs in each pool.", labels,
                 (((q.pool, q.accelerator), q.capacity_gpus) for q in quotas))
    yield _gauge("pool_spot_quota_gpus", "Spot quota of each pool in GPUs (GFS Eq. 10).", labels,
                 (((q.pool, q.accelerator), q.spot_quota_gpus) for q in quotas))
    rows = sorted(allocators.items())
    yield _gauge("pool_guarantee_hours", "Hours a spot job admitted under the quota is "
                 "guaranteed to run (GFS H).", labels,
                 (((pools.get(a, "default"), a), s["params"]["horizon_hours"]) for a, s in rows))
    yield _gauge("pool_guarantee_rate", "Probability the guarantee holds (GFS p).", labels,
                 (((pools.get(a, "default"), a), s["params"]["p"]) for a, s in rows))
    yield _gauge("pool_eta", "Quota scale eta of each pool (GFS Eq. 11).", labels,
                 (((pools.get(a, "default"), a), s["eta"]) for a, s in rows))


FAIR_SHARE_GAUGES = (
    ("held_gpus", "tenant_gpus_held", "GPUs a tenant's jobs hold in a pool."),
    ("entitled_gpus", "tenant_gpus_entitled", "GPUs a tenant is entitled to in a pool now "
                                               "(its nominal share, plus what it may borrow)."),
    ("nominal_gpus", "tenant_gpus_nominal", "A tenant's nominal GPU share of a pool."),
    ("borrowed_gpus", "tenant_gpus_borrowed", "GPUs a tenant holds above its nominal share."),
    ("lent_gpus", "tenant_gpus_lent", "GPUs of a tenant's nominal share lent to others."),
    ("weight", "tenant_share_weight", "A tenant's fair-share weight."),
)


def _fair_share_families(store: Store) -> Iterator[Metric]:
    """Each tenant's fair-share line per pool, as the controller last published it."""
    lines = read_lines(store.get_meta(FAIR_SHARE_KEY))
    names = {t.id: t.name for t in store.list_tenants()} if lines else {}
    for field, name, help_text in FAIR_SHARE_GAUGES:
        yield _gauge(name, help_text, ("tenant", "pool"),
                     (((names.get(t, t), pool), float(line.get(field, 0.0)))
                      for pool, by_tenant in sorted(lines.items())
                      for t, line in sorted(by_tenant.items())))


def _forecast_families(snap: dict[str, Any]) -> Iterator[Metric]:
    yield _gauge("hp_demand_forecast_gpus", "Forecast mean HP GPUs for the current hour, per "
                 "tenant (latest forecast).", ("tenant",),
                 (((t,), m) for t, (m, _) in sorted(snap["forecast"].items())))
    yield _gauge("hp_demand_forecast_upper_gpus", "Forecast 90% upper bound of HP GPUs for the "
                 "current hour, per tenant.", ("tenant",),
                 (((t,), u) for t, (_, u) in sorted(snap["forecast"].items())))
    yield _gauge("hp_demand_realised_gpus", "Mean HP GPUs demanded so far in the current hour, "
                 "per tenant.", ("tenant",),
                 (((t,), v) for t, v in sorted(snap["realised"].items())))


# --------------------------------------------------------------------------------------------
# The API replica's own families
# --------------------------------------------------------------------------------------------
class ApiMetrics:
    """Requests by route and status, and their latency, in one API replica."""

    def __init__(self) -> None:
        self.requests = Counter(f"{PREFIX}api_requests", "HTTP requests by route template, "
                                "method and status.", ["route", "method", "status"],
                                registry=None)
        self.latency = Histogram(f"{PREFIX}api_request_duration_seconds", "HTTP request "
                                 "latency by route template and method.", ["route", "method"],
                                 buckets=API_BUCKETS, registry=None)
        self.node_reports_limited = Counter(
            f"{PREFIX}api_node_reports_limited", "Node reports (/v1/nodes/*) refused by their "
            "rate limit before the credential was checked, by the bucket that refused them.",
            ["limit"], registry=None)

    def record(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)


class ApiStoreCollector(Collector):
    """The API process's own store transaction latency (label process=api)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        b = self.store.tx_histogram()
        h = HistogramMetricFamily(f"{PREFIX}api_store_transaction_seconds",
                                  "Wall time of one store write transaction in the API process.")
        running, cumulative = 0.0, []
        for bound, n in zip((*b.bounds, math.inf), b.counts, strict=True):
            running += n
            cumulative.append((le_label(bound), running))
        h.add_metric([], cumulative, b.total)
        yield h


def build_registry(store: Store, api: ApiMetrics | None = None) -> CollectorRegistry:
    """A dedicated registry with the store's families (and an API replica's, given ``api``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store))
    if api is not None:
        registry.register(ApiStoreCollector(store))
        registry.register(api.requests)
        registry.register(api.latency)
        registry.register(api.node_reports_limited)
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry in Prometheus text format 0.0.4."""
    return generate_latest(registry)


__all__ = ["CONTENT_TYPE", "ApiMetrics", "StoreCollector", "build_registry", "exposition"]
