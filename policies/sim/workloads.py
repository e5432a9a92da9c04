"""Workloads for the GPU cluster simulator (paper 002 Sec. 4.1): gfs-a100 and openb.

**gfs-a100** (:func:`gfs_a100`) is a seeded, pure generator calibrated to the paper's published
statistics of its simulation setting (287 nodes x 8 A100, Apr-Jun 2024 = 91 days):

* task counts over 3 months (Table 3): 138,403 HP and 26,635 spot tasks; the spot load levels
  Low / Medium / High multiply the spot arrivals by 1 / 2 / 4 (Sec. 4.1);
* GPU-per-pod mix (Table 3): HP <1: 0.11 %, 1: 55.11 %, 2: 13.37 %, 4: 7.53 %, 8: 23.69 %;
  spot 0.82 / 67.35 / 5.67 / 12.00 / 14.04 % (renormalised; "<1" = half a card);
* gang share (Table 3): 8.66 % of HP and 27.26 % of spot tasks are gangs. The paper gives no gang
  width: widths 2 / 4 / 8 / 16 pods with probabilities 0.4 / 0.3 / 0.2 / 0.1 (an assumption,
  mean 5.2 pods: LLM-sized gangs, which also brings the offered load to the contention the paper's
  baselines show at every spot level); fractional tasks are never gangs, so the gang probability of whole-GPU tasks
  is scaled up to keep the share;
* diurnal peaks 10:00-24:00 (Sec. 3.2.1): arrival intensity ``peak_factor`` (3x) higher in those
  hours; t = 0 is Monday 00:00 (1 Apr 2024 was a Monday);
* HP demand per tenant shaped like ``alibaba-dlrm`` (pass ``tenant_shapes`` = its hourly series of
  the biggest apps; each tenant's HP arrival intensity follows its own series, tiled over 91 days,
  scaled by its mean demand); without shapes the tenants are flat and equal;
* runtimes: P90 = 6.4 h (Sec. 2) with the body and tail of Table 5's simulated HP JCT (mean
  ~17.8 ks, p99 29.3 ks); spot runtimes are the same shape scaled to the spot JCT of GFS at low
  load minus its JQT (~10.1 ks). Sec. 2's P99 of 19.8 days describes the whole production cluster
  and cannot hold together with Table 3's counts on 2,296 GPUs: 1 % of 165 k tasks running ~20 days
  would alone keep ~2/3 of the cluster busy and the queues would grow without bound. Pass
  ``runtime="sec2"`` to get that heavy tail anyway (P90 6.4 h, P99 19.8 d).

Offered load with the defaults: HP ~55 % of the GPUs on average (near the capacity in the daily
peak), spot ~7 / 15 / 30 % at Low / Medium / High.

**openb** (:func:`tasks_from_pods`): one task per pod of an ``alibaba-openb`` pod list; LS,
Guaranteed, Burstable = HP, BE = spot; ``gpu_milli < 1000`` on a 1-GPU pod = a card share;
duration = deletion - scheduled time; pods without GPUs or never scheduled are skipped;
``gpu_spec`` restricts the GPU models; the tenant is the QoS class.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controlplane.core.errors import InvalidInput
from controlplane.core.units import DAY, HOUR
from policies.placement import TaskRequest

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class SimTask:
    """A task of a workload: what it asks for, when, and how long it runs undisturbed (s)."""

    request: TaskRequest
    submit_s: float
    duration_s: float

    @property
    def id(self) -> str:
        return self.request.id


@dataclass(frozen=True, eq=False)
class NodeSpec:
    """The nodes of a simulated cluster (names, GPU models, GPUs per node)."""

    names: np.ndarray
    gpu_model: np.ndarray
    gpus: np.ndarray

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpus(self) -> int:
        return int(np.asarray(self.gpus).sum())

    @classmethod
    def uniform(cls, nodes: int, gpus: int = 8, model: str = "A100") -> NodeSpec:
        return cls(np.array([f"node-{i:04d}" for i in range(nodes)]), np.array([model] * nodes),
                   np.full(nodes, gpus, dtype=np.int64))

    @classmethod
    def from_nodelist(cls, nodes: Any) -> NodeSpec:
        """From ``clusters.data.openb.NodeList`` (or anything with name, gpu_model, gpus arrays)."""
        return cls(np.asarray(nodes.name), np.asarray(nodes.gpu_model), np.asarray(nodes.gpus, dtype=np.int64))


@dataclass(frozen=True, eq=False)
class Workload:
    """Nodes + tasks sorted by submission; ``start_hour`` = hour-of-week of t = 0."""

    name: str
    nodes: NodeSpec
    tasks: list[SimTask]
    tenants: tuple[str, ...]
    start_hour: int = 0
    info: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# gfs-a100
# ---------------------------------------------------------------------------------------------
#: Table 3, GPUs per pod (%): keys are GPUs (0.5 stands for "< 1").
HP_GPU_MIX = {0.5: 0.11, 1.0: 55.11, 2.0: 13.37, 4.0: 7.53, 8.0: 23.69}
SPOT_GPU_MIX = {0.5: 0.82, 1.0: 67.35, 2.0: 5.67, 4.0: 12.00, 8.0: 14.04}
HP_GANG, SPOT_GANG = 0.0866, 0.2726
GANG_WIDTHS = ((2, 0.4), (4, 0.3), (8, 0.2), (16, 0.1))
#: Quantile anchors (q, seconds) of the HP runtime; log-linear in between.
TABLE5_RUNTIME = ((0.0, 1800.0), (0.1, 11000.0), (0.5, 19000.0), (0.9, 23040.0), (0.99, 29300.0),
                  (1.0, 36000.0))
SEC2_RUNTIME = ((0.0, 60.0), (0.5, 3600.0), (0.9, 23040.0), (0.99, 19.8 * DAY), (1.0, 30 * DAY))
SPOT_RUNTIME_SCALE = 10100.0 / 17400.0
LOAD_LEVELS = {"low": 1.0, "medium": 2.0, "high": 4.0}


@dataclass(frozen=True)
class GfsA100Config:
    """Knobs of :func:`gfs_a100`; the defaults are the paper's setting (see the module doc).

    ``hp_peak_scale`` multiplies the HP arrivals' diurnal peak factor (robustness runs: 1.5, 2);
    ``gang_widths`` are the (pods, weight) of gang tasks.
    """

    days: float = 91.0
    nodes: int = 287
    gpus_per_node: int = 8
    hp_tasks: int = 138_403
    spot_tasks: int = 26_635
    spot_scale: float = 1.0
    tenants: int = 16
    peak_hours: tuple[int, int] = (10, 24)
    peak_factor: float = 3.0
    runtime: str = "table5"
    seed: int = 2
    hp_peak_scale: float = 1.0
    gang_widths: tuple[tuple[int, float], ...] = GANG_WIDTHS

    def __post_init__(self) -> None:
        if self.hp_peak_scale <= 0:
            raise InvalidInput("hp_peak_scale", f"must be > 0, got {self.hp_peak_scale}", fix="use 1, 1.5 or 2")
        if not self.gang_widths or any(w < 2 or q <= 0 for w, q in self.gang_widths):
            raise InvalidInput("gang_widths", f"need (width >= 2, weight > 0) pairs, got {self.gang_widths}",
                               fix="e.g. ((2, 0.5), (4, 0.5))")
        if self.days <= 0 or self.nodes < 1 or self.hp_tasks < 0 or self.spot_tasks < 0:
            raise InvalidInput("config", "days, nodes and task counts must be positive",
                               fix="use the defaults (91 days, 287 nodes, Table 3 counts)")
        if self.spot_scale <= 0:
            raise InvalidInput("spot_scale", f"must be > 0, got {self.spot_scale}", fix="use 1, 2 or 4")
        if self.runtime not in ("table5", "sec2"):
            raise InvalidInput("runtime", f"unknown runtime model {self.runtime!r}", fix="use table5 or sec2")


def sample_runtime(rng: np.random.Generator, n: int, anchors: tuple[tuple[float, float], ...],
                   scale: float = 1.0) -> np.ndarray:
    """Inverse-CDF sampling from a quantile function log-linear between ``anchors``."""
    q = np.array([a[0] for a in anchors])
    v = np.log([a[1] for a in anchors])
    return scale * np.exp(np.interp(rng.random(n), q, v))


def diurnal_weights(hours: int, start_hour: int, peak: tuple[int, int], factor: float) -> np.ndarray:
    """Relative arrival intensity per hour: ``factor`` in [peak0, peak1) of each day, 1 elsewhere."""
    hod = (start_hour + np.arange(hours)) % 24
    return np.where((hod >= peak[0]) & (hod < peak[1]), factor, 1.0)


def _exact_choice(rng: np.random.Generator, values: list[float], weights: list[float], n: int) -> np.ndarray:
    """``n`` draws whose counts match the weights exactly (largest remainder), shuffled."""
    w = np.asarray(weights, dtype=float) / float(np.sum(weights))
    counts = np.floor(w * n).astype(int)
    rest = np.argsort(-(w * n - counts), kind="stable")[: n - int(counts.sum())]
    counts[rest] += 1
    return rng.permutation(np.repeat(np.asarray(values, dtype=float), counts))


def _sample_shapes(rng: np.random.Generator, n: int, mix: dict[float, float], gang: float,
                   widths: tuple[tuple[int, float], ...] = GANG_WIDTHS) -> tuple[np.ndarray, np.ndarray]:
    gpus = _exact_choice(rng, list(mix.keys()), list(mix.values()), n)
    whole = np.flatnonzero(gpus >= 1)
    n_gang = min(int(round(gang * n)), len(whole))
    pods = np.ones(n, dtype=np.int64)
    chosen = rng.choice(whole, size=n_gang, replace=False)
    pods[chosen] = _exact_choice(rng, [w for w, _ in widths], [q for _, q in widths], n_gang).astype(np.int64)
    return gpus, pods


def _arrivals(rng: np.random.Generator, n: int, intensity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``n`` arrivals over the cells of ``intensity[tenant, hour]``: (time s, tenant index)."""
    flat = intensity.ravel() / intensity.sum()
    cells = rng.choice(flat.size, size=n, p=flat)
    tenant, hour = np.divmod(cells, intensity.shape[1])
    return (hour + rng.random(n)) * HOUR, tenant


def gfs_a100(config: GfsA100Config | None = None, tenant_shapes: np.ndarray | None = None,
             tenant_names: list[str] | None = None) -> Workload:
    """The paper's simulation workload (see the module doc for every calibration target)."""
    c = config or GfsA100Config()
    rng = np.random.default_rng(c.seed)
    hours = int(math.ceil(c.days * 24))
    diurnal = diurnal_weights(hours, 0, c.peak_hours, c.peak_factor)
    hp_diurnal = diurnal_weights(hours, 0, c.peak_hours, c.peak_factor * c.hp_peak_scale)
    if tenant_shapes is not None:
        shapes = np.asarray(tenant_shapes, dtype=float)
        if shapes.ndim != 2 or shapes.shape[1] < 1 or np.any(shapes < 0):
            raise InvalidInput("tenant_shapes", f"must be [tenants, hours] >= 0, got {shapes.shape}",
                               fix="pass TenantDemand.gpus rows")
        shapes = shapes[: c.tenants]
        tiled = shapes[:, np.arange(hours) % shapes.shape[1]]
        hp_int = np.maximum(tiled, 1e-9) * hp_diurnal[None, :]
    else:
        hp_int = np.ones((c.tenants, hours)) * hp_diurnal[None, :]
    n_t = hp_int.shape[0]
    names = tuple(tenant_names[:n_t]) if tenant_names else tuple(f"tenant-{i:02d}" for i in range(n_t))
    anchors = TABLE5_RUNTIME if c.runtime == "table5" else SEC2_RUNTIME
    n_spot = int(round(c.spot_tasks * c.spot_scale))

    hp_t, hp_ten = _arrivals(rng, c.hp_tasks, hp_int)
    sp_t, sp_ten = _arrivals(rng, n_spot, np.ones((n_t, hours)) * diurnal[None, :])
    hp_g, hp_w = _sample_shapes(rng, c.hp_tasks, HP_GPU_MIX, HP_GANG, c.gang_widths)
    sp_g, sp_w = _sample_shapes(rng, n_spot, SPOT_GPU_MIX, SPOT_GANG, c.gang_widths)
    hp_d = sample_runtime(rng, c.hp_tasks, anchors)
    sp_d = sample_runtime(rng, n_spot, anchors, SPOT_RUNTIME_SCALE)

    tasks: list[SimTask] = []
    for prio, t, ten, g, w, d in (("hp", hp_t, hp_ten, hp_g, hp_w, hp_d), ("spot", sp_t, sp_ten, sp_g, sp_w, sp_d)):
        for i in range(len(t)):
            req = TaskRequest(f"{prio}-{i:06d}", prio, float(g[i]), int(w[i]), None, names[int(ten[i])])  # type: ignore[arg-type]
            tasks.append(SimTask(req, float(t[i]), float(d[i])))
    tasks.sort(key=lambda s: (s.submit_s, s.id))
    level = next((k for k, v in LOAD_LEVELS.items() if v == c.spot_scale), f"x{c.spot_scale:g}")
    return Workload(f"gfs-a100-{level}", NodeSpec.uniform(c.nodes, c.gpus_per_node, "A100"), tasks, names, 0,
                    {"config": c})


# ---------------------------------------------------------------------------------------------
# openb
# ---------------------------------------------------------------------------------------------
def tasks_from_pods(pods: Any, time_compression: float = 1.0) -> tuple[list[SimTask], tuple[str, ...]]:
    """openb pods -> tasks (see the module doc). ``time_compression`` > 1 packs the arrivals
    closer together (divides submission times, keeps durations): more load on the same nodes."""
    if time_compression <= 0:
        raise InvalidInput("time_compression", f"must be > 0, got {time_compression}", fix="use 1 or more")
    num = np.asarray(pods.num_gpu)
    milli = np.asarray(pods.gpu_milli, dtype=float)
    sched = np.asarray(pods.scheduled_time, dtype=float)
    dur = np.asarray(pods.deletion_time, dtype=float) - sched
    keep = (num > 0) & np.isfinite(dur) & (dur > 0)
    t0 = float(np.min(np.asarray(pods.creation_time)[keep])) if keep.any() else 0.0
    tasks = []
    for i in np.flatnonzero(keep):
        g = float(milli[i]) / 1000.0 if num[i] == 1 and 0 < milli[i] < 1000 else float(num[i])
        qos = str(pods.qos[i])
        spec = str(pods.gpu_spec[i])
        req = TaskRequest(str(pods.name[i]), "spot" if qos == "BE" else "hp", g, 1,
                          tuple(m for m in spec.split("|") if m) or None, qos)
        submit = (float(pods.creation_time[i]) - t0) / time_compression
        tasks.append(SimTask(req, submit, float(dur[i])))
    tasks.sort(key=lambda s: (s.submit_s, s.id))
    log.info("openb: %d of %d pods became tasks", len(tasks), len(num))
    return tasks, tuple(sorted({t.request.tenant for t in tasks if t.request.is_hp}))


def offered_load(tasks: list[SimTask], total_gpus: float) -> float:
    """GPU-seconds asked for per second of the arrival span, as a fraction of the GPUs."""
    if len(tasks) < 2:
        return 0.0
    span = max(t.submit_s for t in tasks) - min(t.submit_s for t in tasks)
    work = sum(t.request.total_gpus * t.duration_s for t in tasks)
    return work / max(span, 1.0) / total_gpus


def mean_concurrent_gpus(tasks: list[SimTask]) -> float:
    """Time-averaged GPUs the tasks hold when none waits (over first arrival to last finish)."""
    if not tasks:
        return 0.0
    start = min(t.submit_s for t in tasks)
    end = max(t.submit_s + t.duration_s for t in tasks)
    return sum(t.request.total_gpus * t.duration_s for t in tasks) / max(end - start, 1.0)


def openb(nodes: Any, pods: Any, target_load: float | None = 0.4, node_count: int | None = None) -> Workload:
    """The openb workload on a cluster sized for contention.

    The trace's pods never ask for more than ~65 of the 6,212 GPUs at once (mean ~38), so on the
    full node list no scheduler ever waits or evicts. With ``target_load`` the pods keep their real
    times and run on the smallest prefix of the node list (8-GPU nodes first, list order) whose
    GPUs reach mean concurrent demand / ``target_load`` (0.4: 40 GPUs, below the 65-GPU peak);
    ``None`` keeps every node. ``node_count`` takes that many nodes of the same order instead (a
    sensitivity run: the 0.4 sizing averages over the trace's quiet first 110 days, so HP demand
    alone exceeds the 40 GPUs for much of days 116-149).
    """
    spec = NodeSpec.from_nodelist(nodes)
    tasks, tenants = tasks_from_pods(pods)
    if node_count is not None:
        if not 0 < node_count <= len(spec.gpus):
            raise InvalidInput("node_count", f"must be in [1, {len(spec.gpus)}], got {node_count}",
                               fix="e.g. 8")
        keep = np.sort(np.argsort(-np.asarray(spec.gpus), kind="stable")[:node_count])
        spec = NodeSpec(spec.names[keep], spec.gpu_model[keep], spec.gpus[keep])
        return Workload("openb", spec, tasks, tenants or ("default",), 0, {"node_count": node_count})
    if target_load is not None and tasks:
        if not 0 < target_load <= 1.5:
            raise InvalidInput("target_load", f"must be in (0, 1.5], got {target_load}", fix="use 0.8")
        need = mean_concurrent_gpus(tasks) / target_load
        biggest = max(t.request.gpus for t in tasks)
        order = np.argsort(-np.asarray(spec.gpus), kind="stable")
        total = np.cumsum(np.asarray(spec.gpus)[order])
        k = int(np.searchsorted(total, max(need, biggest))) + 1
        keep = np.sort(order[:k])
        spec = NodeSpec(spec.names[keep], spec.gpu_model[keep], spec.gpus[keep])
    return Workload("openb", spec, tasks, tenants or ("default",), 0, {"target_load": target_load})
