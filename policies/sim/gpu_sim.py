"""Event-driven GPU cluster simulator for GFS and the baselines (paper 002 Sec. 4).

Events: task arrivals, completions, evictions (HP preemption of spot tasks), and a tick every
``tick_s`` (300 s, Table 4) that refreshes the spot quota of the GFS family (Eq. 9-11) and gives
every scheduler a fresh pass over its queue (Chronus preempts only on these lease ends).

* A spot task evicted at time t keeps the work up to its last checkpoint (every
  ``checkpoint_s``, default 1 h as in the paper's code release) and rejoins the queue.
* Metrics (seconds), HP and spot apart, over the tasks submitted at or after
  ``SimConfig.measure_from_s``: JCT = finish - submit (mean, p99), JQT = the sum of all queueing
  segments, eviction rate = evictions / runs (Sec. 4.2) and evictions per guarantee hour
  (evictions / (evictions + guarantee hours completed + completions)), and the GPU allocation
  rate = time-averaged allocated / total GPUs between the first and the last arrival. From
  ``measure_from_s`` on the run also counts the HP placements that preempted, their victims and
  the victims' ages (:class:`PreemptionStats`), and the quota steps with eta at its clamp or
  with Eq. 10's forecast term setting the quota (:class:`QuotaStats`).
* The spot quota loop (GFS family, or a baseline made with ``quota=True``): one quota per GPU
  pool (one per GPU model by default, ``pools='cluster'``: one for the cluster). The HP demand of
  each tenant in each pool (GPUs held by running HP tasks; ``hp_demand='held_queued'`` adds the
  queued ones, spread over their eligible pools) is sampled every tick; the hour's point is the
  maximum (or ``hourly='mean'``) of its samples. Every hour a forecaster (OrgLinear, refitted
  every ``refit_every_h`` on the last ``fit_window_h`` hours, or the last-week peak for GFS-e)
  predicts the next H hours. Until it has history (``first_fit_h`` = 192 h for OrgLinear:
  lookback 168 + horizon; ``last_week_peak_min_h`` = 24 h for GFS-e) a pool has no quota; every
  tick ``SpotQuotaAllocator.update_eta`` gets the pool's eviction rate (``eta_rate``) and the
  longest spot queueing time of the last H hours, and Q_H (Eq. 10) with S0 = the pool's idle GPUs
  and Sa = its GPUs held by spot tasks is the pool's quota. A spot task may start on the nodes of
  a pool whose quota has room for all its GPUs.
* Chronus as released (``lease_release_s``): at every multiple of it every running task gives
  its GPUs back and queues again, keeping its progress and paying ``lease_restart_s``.

The queue: HP tasks before spot tasks; inside a class the scheduler's :class:`QueueRule`. Tasks
are grouped by shape (priority, GPUs, pods, models): a shape that failed is not tried again
until something is freed, the quota changes or a tick passes, and never while a cheap necessary
condition (enough free cards on eligible nodes) says no. That keeps a 3-month replay fast.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections import deque
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from controlplane.core.errors import InvalidInput
from policies.forecast import LastWeekPeak, OrgLinear
from policies.gfs_options import CHOICES, LIVE_DEFAULT, GfsOptions
from policies.placement import (
    EPS,
    ClusterSnapshot,
    FrameworkScheduler,
    Placement,
    RunningTask,
    TaskRequest,
    queue_key,
)
from policies.quota import (
    QuotaParams,
    SpotQuotaAllocator,
    guard_backoff,
    guard_quiet_decay,
    spot_guard_acts,
    spot_guard_backs_off,
    spot_guard_counts_all_starts,
    spot_guard_gap_s,
    spot_guard_wait_s,
    spot_guard_yields_to_hp,
    starvation_guard,
)
from policies.sim.workloads import SimTask, Workload

log = logging.getLogger(__name__)

ARRIVE, FINISH, TICK = 0, 1, 2
#: Bumped whenever a change alters the result of an existing scheduler or option (cached
#: benchmark cells are keyed by it); a new option that leaves the others' results alone keeps it.
SIM_VERSION = "2026-11-28.1"
Shape = tuple[str, float, int, tuple[str, ...] | None]
#: How long one drain mark of ``hp_reserve='drain*'`` holds its nodes before it is picked afresh.
DRAIN_BOUND_S = 4 * 3600.0


def shape_key(shape: Shape) -> tuple[str, float, int, bool, tuple[str, ...]]:
    """A total order on shapes: "any GPU model" (None) sorts before any list of models."""
    prio, g, w, models = shape
    return (prio, g, w, models is not None, models or ())


#: The options the simulator itself reads, with their choices (named once, in
#: :data:`policies.gfs_options.CHOICES`, where the paper's text and the authors' release differ).
OPTIONS: dict[str, tuple[str, ...]] = {
    name: CHOICES[name] for name in ("hp_demand", "hourly", "eta_rate", "pools", "hp_react", "spot_guard", "hp_reserve")}


@dataclass(frozen=True)
class SimConfig:
    """Simulator knobs (seconds unless named otherwise).

    ``hp_demand``, ``hourly``, ``eta_rate`` and ``pools`` are the :data:`OPTIONS` (the default
    first: the release's choice, except ``eta_rate``, where the release's rule never lets eta
    recover once no spot task runs; docs/gfs.md has the runs). ``eta_rate='release'``: e = failures / (failures + successes) over the last
    ``eta_window_h`` hours, a success per guarantee hour a spot run completes and per completion,
    no eta update without either; ``'paper'``: evictions / starts over the last H hours.
    ``measure_from_s``: only tasks submitted at or after it count in the metrics (a warm-up).
    ``lease_release_s`` (Chronus as released): at every multiple of it every running task is
    released and re-queued, and pays ``lease_restart_s`` when it starts again.
    """

    checkpoint_s: float = 3600.0
    tick_s: float = 300.0
    quota: QuotaParams = field(default_factory=lambda: QuotaParams.for_options(LIVE_DEFAULT))
    first_fit_h: int = 192
    last_week_peak_min_h: int = 24
    refit_every_h: int = 24 * 28
    fit_window_h: int = 24 * 21
    forecaster_maxiter: int = 50
    eviction_short_s: float = 3600.0
    eviction_long_s: float = 86400.0
    check_invariants: bool = False
    max_sim_s: float | None = None  # stop the run here even with tasks left (None: until all finish)
    hp_demand: str = LIVE_DEFAULT.hp_demand
    hourly: str = LIVE_DEFAULT.hourly
    eta_rate: str = LIVE_DEFAULT.eta_rate
    eta_window_h: float = 4.0
    pools: str = LIVE_DEFAULT.pools
    hp_react: str = LIVE_DEFAULT.hp_react
    measure_from_s: float = 0.0
    lease_release_s: float | None = None
    lease_restart_s: float = 120.0
    spot_guard: str = LIVE_DEFAULT.spot_guard
    hp_reserve: str = LIVE_DEFAULT.hp_reserve

    @classmethod
    def for_options(cls, options: GfsOptions, **knobs: Any) -> SimConfig:
        """The config that runs GFS's named ``options`` (and any other ``knobs``)."""
        return cls(quota=QuotaParams.for_options(options), hp_demand=options.hp_demand,
                   hourly=options.hourly, eta_rate=options.eta_rate, pools=options.pools,
                   hp_react=options.hp_react, spot_guard=options.spot_guard, hp_reserve=options.hp_reserve, **knobs)

    def __post_init__(self) -> None:
        if self.tick_s <= 0 or self.checkpoint_s <= 0:
            raise InvalidInput("tick_s/checkpoint_s", "must be > 0", fix="use 300 and 3600")
        for name, allowed in OPTIONS.items():
            if getattr(self, name) not in allowed:
                raise InvalidInput(name, f"unknown option {getattr(self, name)!r}", fix=f"use one of {', '.join(allowed)}")
        if self.eta_window_h <= 0 or self.lease_restart_s < 0:
            raise InvalidInput("eta_window_h/lease_restart_s", "must be > 0 / >= 0", fix="use 4 and 120")


@dataclass
class TaskRecord:
    """Per-task bookkeeping of the simulation."""

    task: SimTask
    remaining_s: float
    queued_since: float
    jqt_s: float = 0.0
    runs: int = 0
    evictions: int = 0
    finish_s: float = math.nan
    epoch: int = 0
    finished: int = 0
    guarantee_hours: int = 0
    lease_restart: bool = False


@dataclass(frozen=True)
class ClassMetrics:
    tasks: int
    finished: int
    jct_mean_s: float
    jct_p99_s: float
    jqt_mean_s: float
    runs: int
    evictions: int
    guarantee_hours: int = 0
    completions: int = 0

    @property
    def eviction_rate(self) -> float:
        """Evictions per run (Sec. 4.2)."""
        return self.evictions / self.runs if self.runs else 0.0

    @property
    def eviction_per_guarantee_hour(self) -> float:
        """Failures / (failures + successes), a success per completed guarantee hour or completion."""
        n = self.evictions + self.guarantee_hours + self.completions
        return self.evictions / n if n else 0.0


@dataclass
class PreemptionStats:
    """The HP placements that evicted spot tasks at or after ``SimConfig.measure_from_s``: how
    many, their victims and the victims' GPUs, and each victim run's age (s) when evicted."""

    preemptions: int = 0
    victims: int = 0
    victim_gpus: float = 0.0
    ages_s: list[float] = field(default_factory=list)

    def share_younger_than(self, seconds: float) -> float:
        """Share of the victims whose run had lasted less than ``seconds``."""
        return sum(a < seconds for a in self.ages_s) / len(self.ages_s) if self.ages_s else 0.0


@dataclass
class QuotaStats:
    """The quota loop's 300 s steps at or after ``SimConfig.measure_from_s``, over the pools with a
    forecast: how many, how many with eta at its upper clamp, and how many in which Eq. 10's
    forecast term f(p, H) * eta (not the idle + spot GPUs S0 + Sa) set the quota."""

    pool_ticks: int = 0
    eta_at_max: int = 0
    forecast_binds: int = 0


@dataclass(frozen=True)
class SimResult:
    scheduler: str
    workload: str
    hp: ClassMetrics
    spot: ClassMetrics
    allocation_rate: float
    makespan_s: float
    schedule_calls: int
    records: dict[str, TaskRecord] = field(repr=False, default_factory=dict)
    preemption: PreemptionStats = field(repr=False, default_factory=PreemptionStats)
    quota_stats: QuotaStats = field(repr=False, default_factory=QuotaStats)

    def summary(self) -> dict[str, float]:
        """The benchmark's JSON fields."""
        return {"hp_jct": self.hp.jct_mean_s, "hp_jct_p99": self.hp.jct_p99_s, "hp_jqt": self.hp.jqt_mean_s,
                "spot_jct": self.spot.jct_mean_s, "spot_jqt": self.spot.jqt_mean_s,
                "eviction_rate": self.spot.eviction_rate, "eviction_per_gh": self.spot.eviction_per_guarantee_hour,
                "allocation_rate": self.allocation_rate}


def _ro(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


class _MemoBound:
    """A forecast whose ``upper(p)`` is computed once (the quota asks every tick)."""

    def __init__(self, forecast: Any) -> None:
        self.f = forecast
        self._up: dict[float, np.ndarray] = {}

    @property
    def mean(self) -> np.ndarray:
        return np.asarray(self.f.mean)

    @property
    def sigma(self) -> np.ndarray:
        return np.asarray(self.f.sigma)

    def upper(self, p: float) -> np.ndarray:
        if p not in self._up:
            self._up[p] = np.asarray(self.f.upper(p))
        return self._up[p]


class QuotaLoop:
    """Eq. 9-11 driven by the simulated HP demand history (see the module doc)."""

    def __init__(self, n_tenants: int, capacity: float, forecaster: str, adapt_eta: bool,
                 cfg: SimConfig, start_hour: int) -> None:
        self.cfg = cfg
        self.capacity = capacity
        self.allocator = SpotQuotaAllocator(cfg.quota)
        self.adapt_eta = adapt_eta
        self.use_orglinear = forecaster == "orglinear"
        self.start_hour = start_hour
        self._hist = np.zeros((n_tenants, 256))  # hourly history [tenants, hours], grown by doubling
        self.n_hours = 0
        self.acc = np.zeros(n_tenants)
        self.samples = 0
        self.model: OrgLinear | None = None
        self.fitted_at = -10**9
        self.forecast: Any = None
        self.quota: float | None = None

    @property
    def hours(self) -> np.ndarray:
        """The hourly history so far, one row per hour: [hours, tenants]."""
        return self._hist[:, :self.n_hours].T

    def _append_hour(self, point: np.ndarray) -> None:
        if self.n_hours == self._hist.shape[1]:
            self._hist = np.concatenate([self._hist, np.zeros_like(self._hist)], axis=1)
        self._hist[:, self.n_hours] = point
        self.n_hours += 1

    def sample(self, demand: np.ndarray) -> None:
        if self.cfg.hourly == "max":
            self.acc = np.maximum(self.acc, demand)
        else:
            self.acc += demand
        self.samples += 1

    def close_hour(self) -> None:
        self._append_hour(self.acc.copy() if self.cfg.hourly == "max" else self.acc / max(self.samples, 1))
        self.acc = np.zeros_like(self.acc)
        self.samples = 0
        t = self.n_hours
        hist = self._hist[:, :t]
        horizon = self.cfg.quota.horizon_hours
        if self.use_orglinear and t >= self.cfg.first_fit_h and t - self.fitted_at >= self.cfg.refit_every_h:
            window = hist[:, -self.cfg.fit_window_h:]
            try:
                self.model = OrgLinear(horizon=max(horizon, 4), maxiter=self.cfg.forecaster_maxiter).fit(
                    window, self.start_hour + t - window.shape[1])
                self.fitted_at = t
            except Exception as exc:  # a failed fit keeps the previous model / the fallback
                log.warning("OrgLinear fit failed at hour %d: %s", t, exc)
            self.fitted_at = t  # success or not: next try after refit_every_h
        if self.model is not None and t >= self.model.lookback:
            # start_hour is the hour-of-week of hist's column 0 (the forecaster adds t itself); the
            # forecaster reads only the last ``lookback`` hours, so it gets those and their start
            lb = self.model.lookback
            self.forecast = _MemoBound(self.model.predict(hist[:, t - lb:], horizon, self.start_hour + t - lb))
        elif not self.use_orglinear and t >= self.cfg.last_week_peak_min_h:
            self.forecast = _MemoBound(LastWeekPeak().predict(hist, horizon, self.start_hour))
        else:
            self.forecast = None  # no estimator yet: no quota (spot may take any idle GPU)

    def update(self, eviction_rate: float | None, max_queue_s: float, idle: float, spot_alloc: float) -> float | None:
        """One 300 s step: Eq. 11 (skipped when ``eviction_rate`` is None: no data), then Eq. 10."""
        if self.adapt_eta and eviction_rate is not None:
            self.allocator.update_eta(min(max(eviction_rate, 0.0), 1.0), max(max_queue_s, 0.0))
        if self.forecast is None:
            self.quota = None  # no history yet: no quota (the first hour)
        else:
            self.quota = self.allocator.quota(self.capacity, self.forecast, max(idle, 0.0), max(spot_alloc, 0.0))
        return self.quota


class GpuSimulator:
    """Drives one scheduler over one workload; :meth:`run` returns a :class:`SimResult`."""

    def __init__(self, workload: Workload, scheduler: FrameworkScheduler, config: SimConfig | None = None) -> None:
        self.w = workload
        self.s = scheduler
        self.cfg = config or SimConfig()
        nodes = workload.nodes
        self.n = len(nodes)
        g = np.asarray(nodes.gpus, dtype=np.int64)
        cmax = int(g.max()) if self.n else 1
        self.gpus = g
        self.total = float(g.sum())
        self.card_free = (np.arange(cmax)[None, :] < g[:, None]).astype(float)
        self.idle = g.astype(np.int64).copy()
        self.free = g.astype(float).copy()
        self.hp = np.zeros(self.n)
        self.spot = np.zeros(self.n)
        self.ev_short = np.zeros(self.n)
        self.ev_long = np.zeros(self.n)
        self._ev_q_short: deque[tuple[float, int]] = deque()
        self._ev_q_long: deque[tuple[float, int]] = deque()
        self.running: dict[str, RunningTask] = {}
        self.node_tasks: dict[int, dict[str, None]] = {i: {} for i in range(self.n)}
        self.records: dict[str, TaskRecord] = {}
        self.queues: dict[str, dict[Shape, deque[str]]] = {"hp": {}, "spot": {}}
        self.failed: set[Shape] = set()
        self.events: list[tuple[float, int, int, str, int]] = []
        self._seq = 0
        self.now = 0.0
        self.spot_alloc = 0.0
        self.hp_alloc = 0.0
        self.G = 0
        self.F = 0
        self.calls = 0
        self._alloc_area = 0.0
        self._last_t = 0.0
        self._recent_waits: deque[tuple[float, float]] = deque()
        self.tenant_index = {t: i for i, t in enumerate(workload.tenants)}
        n_ten = max(len(workload.tenants), 1)
        models = np.asarray(nodes.gpu_model).astype(str)
        self.pool_names = sorted(set(models.tolist())) if self.cfg.pools == "per_model" and self.n else ["all"]
        self.pool_of = (np.searchsorted(np.array(self.pool_names), models) if len(self.pool_names) > 1
                        else np.zeros(self.n, dtype=np.int64))
        n_pools = len(self.pool_names)
        self.pool_cap = np.bincount(self.pool_of, weights=g.astype(float), minlength=n_pools)
        self.hp_running = np.zeros((n_pools, n_ten))  # GPUs held by running HP tasks per pool, tenant
        self.hp_queued = np.zeros((n_pools, n_ten))  # GPUs asked for by queued HP tasks (spread)
        self.spot_pool = np.zeros(n_pools)  # GPUs held by spot tasks per pool
        self._pool_events: list[dict[str, deque[float]]] = [
            {"runs": deque(), "evictions": deque(), "successes": deque()} for _ in range(n_pools)]
        self._gh_heap: list[tuple[float, str, int]] = []  # (next guarantee-hour mark, task, run number)
        self.quota_loops: list[QuotaLoop] = []
        if scheduler.quota is not None:
            self.quota_loops = [QuotaLoop(n_ten, float(c), scheduler.quota.forecaster, scheduler.quota.adapt_eta,
                                          self.cfg, workload.start_hour) for c in self.pool_cap]
        self._lease_s = self.cfg.lease_release_s or getattr(scheduler, "lease_release_s", None)
        self._ticks = 0
        self._reserve: tuple[str, np.ndarray] | None = None
        self._drain_since = -np.inf  # when the current drain mark of hp_reserve='drain*' was set
        self._guard_at = np.full(n_pools, -np.inf)  # when spot_guard last raised each pool's quota
        self._guard_factor = np.ones(n_pools)  # spot_guard='*_bk': each pool's wait factor
        self._guard_admitted: dict[str, int] = {}  # spot_guard='*_bk': task the guard let in -> its pool
        self._guard_raised = np.zeros(n_pools, dtype=bool)  # the last quota update of the pool was a raise
        self._guard_quiet_since = np.zeros(n_pools)  # '*_bkall': since when no task it admitted was evicted
        self.preemption = PreemptionStats()
        self.quota_stats = QuotaStats()
        self.unschedulable: list[str] = []
        self._ro = {k: _ro(v) for k, v in (("names", np.asarray(nodes.names)), ("models", np.asarray(nodes.gpu_model)),
                                            ("gpus", self.gpus), ("card_free", self.card_free), ("hp", self.hp),
                                            ("spot", self.spot), ("ev_short", self.ev_short),
                                            ("ev_long", self.ev_long), ("idle", self.idle), ("free", self.free))}
        self._running_view = MappingProxyType(self.running)
        self._node_tasks_view = MappingProxyType(self.node_tasks)

    @property
    def quota_loop(self) -> QuotaLoop | None:
        """The quota loop of the first pool (the only one on a one-model cluster)."""
        return self.quota_loops[0] if self.quota_loops else None

    def _pools_for(self, models: tuple[str, ...] | None) -> np.ndarray:
        """Indices of the pools whose GPU model a task may use."""
        if models is None or len(self.pool_names) == 1:
            return np.arange(len(self.pool_names))
        return np.array([i for i, m in enumerate(self.pool_names) if m in models], dtype=np.int64)

    def _spot_room(self, models: tuple[str, ...] | None) -> tuple[np.ndarray, np.ndarray]:
        """(eligible pools, GPUs each may still give spot tasks under its quota; inf = no quota)."""
        pools = self._pools_for(models)
        room = np.full(len(pools), np.inf)
        for k, i in enumerate(pools):
            if self.quota_loops and self.quota_loops[i].quota is not None:
                room[k] = self.quota_loops[i].quota - self.spot_pool[i]
        return pools, room

    # ---- events --------------------------------------------------------------------------
    def _push(self, t: float, kind: int, tid: str = "", epoch: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, kind, self._seq, tid, epoch))

    def fits_at_all(self, req: TaskRequest) -> bool:
        """Could the task run on the empty cluster? (else it would wait forever)"""
        ok = np.ones(self.n, dtype=bool)
        if req.gpu_model:
            ok &= np.isin(np.asarray(self.w.nodes.gpu_model), req.gpu_model)
        per_node = np.floor(self.gpus / round(req.gpus)) if req.gpus >= 1 else np.floor(self.gpus / req.gpus)
        return bool(per_node[ok].sum() >= req.pods)

    def run(self) -> SimResult:
        tasks = []
        for st in self.w.tasks:
            if self.fits_at_all(st.request):
                tasks.append(st)
            else:
                self.unschedulable.append(st.id)
        if self.unschedulable:
            log.warning("%d tasks can never fit this cluster and are left out", len(self.unschedulable))
        for st in tasks:
            if st.id in self.records:
                raise InvalidInput("tasks", f"duplicate task id {st.id!r}", fix="give every task a unique id")
            self.records[st.id] = TaskRecord(st, st.duration_s, st.submit_s)
            self._push(st.submit_s, ARRIVE, st.id)
        first = tasks[0].submit_s if tasks else 0.0
        self.last_arrival = tasks[-1].submit_s if tasks else 0.0
        self.first_arrival = first
        self._last_t = first
        self._push(math.floor(first / self.cfg.tick_s) * self.cfg.tick_s + self.cfg.tick_s, TICK)
        unfinished = len(tasks)
        stop = math.inf if self.cfg.max_sim_s is None else first + self.cfg.max_sim_s
        while self.events and unfinished and self.events[0][0] <= stop:
            t = self.events[0][0]
            self._advance(t)
            freed, arrivals = False, []
            while self.events and self.events[0][0] <= t:  # every event of this instant first
                _, kind, _, tid, epoch = heapq.heappop(self.events)
                if kind == ARRIVE:
                    self._enqueue(tid, t)
                    arrivals.append(tid)
                elif kind == FINISH:
                    if epoch == self.records[tid].epoch and tid in self.running:
                        self._finish(tid)
                        unfinished -= 1
                        freed = True
                else:
                    self._tick()
                    freed = True
                    if unfinished:
                        self._push(t + self.cfg.tick_s, TICK)
            if freed:
                self.failed.clear()
                self._drain()
            else:
                for tid in arrivals:
                    self._try_new(tid)
        return self._result()

    def _advance(self, t: float) -> None:
        if t > self._last_t:
            lo, hi = max(self._last_t, self.first_arrival), min(t, self.last_arrival)
            if hi > lo:
                self._alloc_area += (self.total - float(self.free.sum())) * (hi - lo)
            self._last_t = t
        self.now = t
        for q, arr, win in ((self._ev_q_short, self.ev_short, self.cfg.eviction_short_s),
                            (self._ev_q_long, self.ev_long, self.cfg.eviction_long_s)):
            while q and q[0][0] <= t - win:
                arr[q.popleft()[1]] -= 1

    # ---- queue ---------------------------------------------------------------------------
    def _enqueue(self, tid: str, t: float) -> None:
        rec = self.records[tid]
        rec.queued_since = t
        req = rec.task.request
        self.queues[req.priority].setdefault(req.shape, deque()).append(tid)
        if req.is_hp:
            self._queued_hp(req, +1.0)

    def _queued_hp(self, req: TaskRequest, sign: float) -> None:
        """A queued HP task's GPUs, spread over its eligible pools by capacity (held_queued only)."""
        pools = self._pools_for(req.gpu_model)
        cap = self.pool_cap[pools]
        share = cap / cap.sum() if cap.sum() > 0 else np.full(len(pools), 1.0 / max(len(pools), 1))
        self.hp_queued[pools, self.tenant_index.get(req.tenant, 0)] += sign * req.total_gpus * share

    def _try_new(self, tid: str) -> bool:
        """An arrival frees nothing: try it alone, when no queued task of its class goes first."""
        req = self.records[tid].task.request
        q = self.queues[req.priority]
        if len(q[req.shape]) > 1 or req.shape in self.failed:
            return False
        if self.s.queue.strict and any(d for sh, d in q.items() if d and sh != req.shape):
            return False
        if not self._cheap_ok(req.shape):
            self.failed.add(req.shape)
            return False
        return self._attempt(req.shape, q)

    def _order_key(self, shape: Shape, d: deque[str]) -> tuple[float, ...]:
        return queue_key(self.s.queue.order, shape[0] == "hp", shape[1], shape[2], self.records[d[0]].task.submit_s)

    def _drain(self) -> None:
        for prio in ("hp", "spot"):
            q = self.queues[prio]
            live = [(self._order_key(sh, d), shape_key(sh), sh) for sh, d in q.items() if d and sh not in self.failed]
            if not live:
                continue
            if self.s.queue.order != "fcfs" and not self.s.queue.strict:
                for _, _, sh in sorted(live):
                    while q[sh] and sh not in self.failed:
                        if not self._cheap_ok(sh) or not self._attempt(sh, q):
                            self.failed.add(sh)
                continue
            heap = list(live)
            heapq.heapify(heap)
            while heap:
                _, _, sh = heapq.heappop(heap)
                if self._cheap_ok(sh) and self._attempt(sh, q):
                    if q[sh]:
                        heapq.heappush(heap, (self._order_key(sh, q[sh]), shape_key(sh), sh))
                else:
                    self.failed.add(sh)
                    if self.s.queue.strict:
                        break  # strict FCFS: the blocked head holds back its whole class

    def _cheap_ok(self, shape: Shape) -> bool:
        """A necessary condition (free GPUs, quota) checked before calling the scheduler."""
        prio, g, w, _ = shape
        need = g * w
        if prio == "spot":
            if float(self.free.sum()) < need - EPS:
                return False
            if self.quota_loops:
                return bool(np.any(self._spot_room(shape[3])[1] >= need - EPS))
            return True
        return float(self.free.sum()) + self.spot_alloc >= need - EPS

    def _snapshot(self, req: TaskRequest | None = None) -> ClusterSnapshot:
        r = self._ro  # read-only views of the live arrays: the snapshot is trusted, no copies
        quota, nodes = None, None
        if self.quota_loops and req is not None and not req.is_hp:
            pools, room = self._spot_room(req.gpu_model)
            ok = pools[room >= req.total_gpus - EPS]
            if np.isfinite(room).any():
                # the spot task may use the nodes of the pools with room for it; Q_H as seen by
                # Algorithm 3 is what it holds now plus the largest room of those pools
                quota = self.spot_alloc + (float(room[room >= req.total_gpus - EPS].max()) if len(ok) else 0.0)
                nodes = _ro(np.isin(self.pool_of, ok)) if len(self.pool_names) > 1 else None
                if not np.isfinite(quota):
                    quota = None
        held, held_for = (self._reserve[1], self._reserve[0]) if self._reserve else (None, None)
        return ClusterSnapshot(
            self.now, r["names"], r["models"], r["gpus"], r["card_free"], r["hp"], r["spot"], r["ev_short"],
            r["ev_long"], self._running_view, self._node_tasks_view, self.G, self.F,
            quota, self.spot_alloc, r["idle"], r["free"], spot_nodes=nodes, reserved_nodes=held,
            reserved_for=held_for)

    def _attempt(self, shape: Shape, q: dict[Shape, deque[str]]) -> bool:
        tid = q[shape][0]
        rec = self.records[tid]
        self.calls += 1
        placement = self.s.schedule(self._snapshot(rec.task.request), rec.task.request)
        if placement is None:
            self.failed.add(shape)
            return False
        q[shape].popleft()
        self._start(rec, placement)
        return True

    # ---- state changes -------------------------------------------------------------------
    def _start(self, rec: TaskRecord, p: Placement) -> None:
        req = rec.task.request
        if self._reserve is not None and self._reserve[0] == req.id:
            self._reserve = None
        if p.victims and self.now >= self.cfg.measure_from_s:
            self._count_preemption(p.victims)
        for vid in p.victims:
            self._evict(vid)
        cards = []
        for pod in p.pods:
            for c, s in pod.cards:
                cards.append((pod.node, c, s))
                self.card_free[pod.node, c] -= s
                if self.card_free[pod.node, c] < -EPS:
                    raise RuntimeError(f"GPU double-booked: node {pod.node} card {c} by {req.id}")
            self._refresh(pod.node)
            (self.hp if req.is_hp else self.spot)[pod.node] += req.gpus
            self.node_tasks[pod.node][req.id] = None
        self._pool_account(cards, req.is_hp, req.tenant, +1.0)
        if len(p.pods) != req.pods:
            raise RuntimeError(f"placement of {req.id} has {len(p.pods)} pods, the gang needs {req.pods}")
        wait = self.now - rec.queued_since
        rec.jqt_s += wait
        restart = rec.lease_restart
        if not restart:
            rec.runs += 1
        rec.lease_restart = False
        rec.epoch += 1
        if req.is_hp:
            self.hp_alloc += req.total_gpus
            self._queued_hp(req, -1.0)
        else:
            self.spot_alloc += req.total_gpus
            for pool in {int(self.pool_of[pod.node]) for pod in p.pods}:
                self._pool_events[pool]["runs"].append(self.now)
                if self._guard_raised[pool] and spot_guard_counts_all_starts(self.cfg.spot_guard):
                    self._guard_admitted[req.id] = pool
            self._recent_waits.append((self.now, wait))
            if not restart:  # a lease restart continues its run's guarantee periods
                heapq.heappush(self._gh_heap, (self.now + self.cfg.quota.horizon_hours * 3600.0, req.id, rec.runs))
        self.running[req.id] = RunningTask(req.id, req.priority, req.gpus, req.pods, tuple(cards), self.now,
                                           self.cfg.checkpoint_s, req.tenant)
        self._push(self.now + rec.remaining_s, FINISH, req.id, rec.epoch)
        if self.cfg.check_invariants:
            self._check()

    def _count_preemption(self, victims: tuple[str, ...]) -> None:
        st = self.preemption
        st.preemptions += 1
        for vid in victims:
            rt = self.running[vid]
            st.victims += 1
            st.victim_gpus += rt.total_gpus
            st.ages_s.append(self.now - rt.started_s)

    def _release(self, tid: str) -> RunningTask:
        rt = self.running.pop(tid)
        touched = set()
        for n, c, s in rt.cards:
            self.card_free[n, c] += s
            if self.card_free[n, c] > 1 + EPS:
                raise RuntimeError(f"card over-freed: node {n} card {c} by {tid}")
            touched.add(n)
            (self.hp if rt.priority == "hp" else self.spot)[n] -= s
        req = self.records[tid].task.request
        for n in touched:
            self.node_tasks[n].pop(tid, None)
            self._refresh(n)
        self._pool_account(rt.cards, rt.priority == "hp", req.tenant, -1.0)
        if rt.priority == "hp":
            self.hp_alloc -= rt.total_gpus
        else:
            self.spot_alloc -= rt.total_gpus
        return rt

    def _pool_account(self, cards: Any, hp: bool, tenant: str, sign: float) -> None:
        """GPUs of ``cards`` added to (or taken from) their pools' running-HP or spot totals."""
        for n, _, share in cards:
            if hp:
                self.hp_running[self.pool_of[n], self.tenant_index.get(tenant, 0)] += sign * share
            else:
                self.spot_pool[self.pool_of[n]] += sign * share

    def _finish(self, tid: str) -> None:
        rt = self._release(tid)
        rec = self.records[tid]
        rec.finish_s = self.now
        rec.finished += 1
        rec.remaining_s = 0.0
        if rt.priority == "spot":
            self.G += 1
            self._pool_event(rt, "successes")
            self._guard_outcome(tid, evicted=False)

    def _pool_event(self, rt: RunningTask, kind: str) -> None:
        for pool in {int(self.pool_of[n]) for n, _, _ in rt.cards}:
            self._pool_events[pool][kind].append(self.now)

    def _evict(self, tid: str) -> None:
        rt = self.running.get(tid)
        if rt is None or rt.priority != "spot":
            raise RuntimeError(f"victim {tid} is not a running spot task")
        self._release(tid)
        rec = self.records[tid]
        saved = rt.last_checkpoint_s(self.now) - rt.started_s
        rec.remaining_s = max(rec.remaining_s - saved, 0.0)
        rec.evictions += 1
        rec.epoch += 1
        self.F += 1
        self._guard_outcome(tid, evicted=True)
        self._pool_event(rt, "evictions")
        for n in {n for n, _, _ in rt.cards}:
            self.ev_short[n] += 1
            self.ev_long[n] += 1
            self._ev_q_short.append((self.now, n))
            self._ev_q_long.append((self.now, n))
        self._enqueue(tid, self.now)

    def _refresh(self, n: int) -> None:
        row = self.card_free[n]
        self.idle[n] = int((row >= 1 - EPS).sum())
        self.free[n] = float(row.sum())

    def _guarantee_hours(self) -> None:
        """Each spot run that has held its GPUs for another guarantee period scores a success."""
        period = self.cfg.quota.horizon_hours * 3600.0
        while self._gh_heap and self._gh_heap[0][0] <= self.now + EPS:
            t, tid, run = heapq.heappop(self._gh_heap)
            rt = self.running.get(tid)
            if rt is None or self.records[tid].runs != run:
                continue
            self.records[tid].guarantee_hours += 1
            self._pool_event(rt, "successes")
            self._guard_outcome(tid, evicted=False)
            heapq.heappush(self._gh_heap, (t + period, tid, run))

    def _eviction_rate(self, pool: int) -> float | None:
        """Eq. 11's e for one pool by ``eta_rate`` (see :class:`SimConfig`); None = no data."""
        ev = self._pool_events[pool]
        release = self.cfg.eta_rate == "release"
        win = (self.cfg.eta_window_h if release else self.cfg.quota.horizon_hours) * 3600.0
        for dq in ev.values():
            while dq and dq[0] < self.now - win:
                dq.popleft()
        f = len(ev["evictions"])
        if release:
            n = f + len(ev["successes"])
            return f / n if n else None
        runs = len(ev["runs"])
        return min(f / runs, 1.0) if runs else (1.0 if f else 0.0)

    def _tick(self) -> None:
        self._ticks += 1
        self._guarantee_hours()
        if self.quota_loops:
            self._quota_tick()
        if self.cfg.hp_reserve == "head":
            self._reserve = self._reservation()
        elif self.cfg.hp_reserve.startswith("drain"):
            self._drain_tick()
        if self._lease_s and self._at_multiple(self._lease_s):
            self._release_leases()

    def _reservation(self) -> tuple[str, np.ndarray] | None:
        """``hp_reserve='head'``: the oldest queued HP task of whole GPUs that has waited a tick,
        and the eligible nodes of least HP-held GPUs (most free next), one per pod: HP GPUs
        cannot be preempted, so those nodes are the first to drain for it."""
        head: TaskRecord | None = None
        for (_, g, _, _), d in self.queues["hp"].items():
            if d and g >= 1 - EPS:
                rec = self.records[d[0]]
                if head is None or rec.queued_since < head.queued_since:
                    head = rec
        if head is None or self.now - head.queued_since < self.cfg.tick_s - EPS:
            return None
        req = head.task.request
        ok = self.gpus >= round(req.gpus)
        if req.gpu_model:
            ok &= np.isin(np.asarray(self.w.nodes.gpu_model), req.gpu_model)
        cand = np.flatnonzero(ok)
        if len(cand) < req.pods:
            return None
        order = cand[np.lexsort((-self.free[cand], self.hp[cand]))][: req.pods]
        mask = np.zeros(self.n, dtype=bool)
        mask[order] = True
        return req.id, _ro(mask)

    def _whole_node_head(self) -> TaskRecord | None:
        """The oldest queued HP task whose pods each need a whole node of every eligible model."""
        head: TaskRecord | None = None
        for (_, g, _, models), d in self.queues["hp"].items():
            if not d or g < 1 - EPS:
                continue
            ok = self.gpus >= round(g)
            if models:
                ok &= np.isin(np.asarray(self.w.nodes.gpu_model), models)
            if ok.any() and np.all(self.gpus[ok] == round(g)):
                rec = self.records[d[0]]
                if head is None or rec.queued_since < head.queued_since:
                    head = rec
        return head

    def _drain_tick(self) -> None:
        """``hp_reserve='drain*'``: keep the drain mark while its HP task waits (up to
        :data:`DRAIN_BOUND_S`), else mark the nodes of least HP GPUs (most free next) for the oldest
        whole-node HP task that waited a tick; ``drain`` evicts the marked nodes' spot tasks at once."""
        if self._reserve is not None and self.now - self._drain_since < DRAIN_BOUND_S - EPS \
                and self._reserve[0] not in self.running:
            return
        self._reserve = None
        head = self._whole_node_head()
        if head is None or self.now - head.queued_since < self.cfg.tick_s - EPS:
            return
        req = head.task.request
        ok = self.gpus >= round(req.gpus)
        if req.gpu_model:
            ok &= np.isin(np.asarray(self.w.nodes.gpu_model), req.gpu_model)
        cand = np.flatnonzero(ok)
        if len(cand) < req.pods:
            return
        nodes = cand[np.lexsort((-self.free[cand], self.hp[cand]))][: req.pods]
        mask = np.zeros(self.n, dtype=bool)
        mask[nodes] = True
        self._reserve, self._drain_since = (req.id, _ro(mask)), self.now
        if self.cfg.hp_reserve == "drain":
            for n in nodes:
                for tid in [t for t in self.node_tasks[int(n)] if self.running[t].priority == "spot"]:
                    self._evict(tid)

    def _at_multiple(self, period: float) -> bool:
        r = self.now % period
        return r < 1e-6 or period - r < 1e-6

    def _quota_tick(self) -> None:
        demand = self.hp_running if self.cfg.hp_demand == "running" else self.hp_running + self.hp_queued
        per_hour = max(int(round(3600.0 / self.cfg.tick_s)), 1)
        h = self.cfg.quota.horizon_hours * 3600.0
        while self._recent_waits and self._recent_waits[0][0] < self.now - h:
            self._recent_waits.popleft()
        waits = [w for _, w in self._recent_waits]
        for d in self.queues["spot"].values():
            if d:
                waits.append(self.now - self.records[d[0]].queued_since)
        longest = max(waits, default=0.0)
        for i, ql in enumerate(self.quota_loops):
            ql.sample(np.maximum(demand[i], 0.0))
            if self._ticks % per_hour == 0:
                ql.close_hour()
            idle = float(self.free[self.pool_of == i].sum()) if len(self.quota_loops) > 1 else float(self.free.sum())
            rate = self._eviction_rate(i)
            q = ql.update(rate, longest, idle, float(self.spot_pool[i]))
            if q is not None:
                self._guard_raised[i] = False
            if q is not None and self._guard_on(rate) and not self._hp_waits_for(i):
                q = ql.quota = self._guarded(i, q, idle)
                self._guard_raised[i] = self._guard_at[i] == self.now
            if self.cfg.hp_react == "queued":
                q = ql.quota = self._hp_react_cap(i, q)
            if q is not None and self.now >= self.cfg.measure_from_s:
                st = self.quota_stats
                st.pool_ticks += 1
                st.eta_at_max += ql.allocator.eta >= ql.allocator.params.eta_max - EPS
                st.forecast_binds += q < idle + float(self.spot_pool[i]) - EPS

    def _guard_on(self, eviction_rate: float | None) -> bool:
        """Whether ``spot_guard`` acts this tick (:func:`policies.quota.spot_guard_acts`)."""
        return spot_guard_acts(self.cfg.spot_guard, eviction_rate, self.cfg.quota.tolerated_eviction_rate)

    def _hp_waits_for(self, pool: int) -> bool:
        """``spot_guard='*_hpq'``: an HP task that may use the pool is queued (the guard stands down)."""
        return spot_guard_yields_to_hp(self.cfg.spot_guard) and float(self.hp_queued[pool].sum()) > EPS

    def _guarded(self, pool: int, quota: float, idle: float) -> float:
        """``spot_guard``: :func:`policies.quota.starvation_guard` for the oldest spot task queued for
        this pool, after theta or 4 theta, at most once per H for the ``_1ph`` choice."""
        oldest: TaskRecord | None = None
        name = self.pool_names[pool]
        for (_, _, _, models), d in self.queues["spot"].items():
            if d and (models is None or len(self.pool_names) == 1 or name in models):
                head = self.records[d[0]]
                if oldest is None or head.queued_since < oldest.queued_since:
                    oldest = head
        gap = spot_guard_gap_s(self.cfg.spot_guard, self.cfg.quota.horizon_hours)
        if oldest is None or self.now - self._guard_at[pool] < gap - EPS:
            return quota
        if spot_guard_counts_all_starts(self.cfg.spot_guard):
            factor, used = guard_quiet_decay(float(self._guard_factor[pool]), self.now - self._guard_quiet_since[pool])
            self._guard_factor[pool] = factor
            self._guard_quiet_since[pool] += used
        wait_s = spot_guard_wait_s(self.cfg.spot_guard, self.cfg.quota.theta_seconds) * self._guard_factor[pool]
        raised = starvation_guard(quota, oldest.task.request.total_gpus, self.now - oldest.queued_since,
                                  float(self.spot_pool[pool]), idle, wait_s)
        if raised > quota:
            self._guard_at[pool] = self.now
            if spot_guard_backs_off(self.cfg.spot_guard):
                self._guard_admitted[oldest.task.id] = pool
        return raised

    def _guard_outcome(self, tid: str, evicted: bool) -> None:
        """``spot_guard='*_bk'``: a task the guard let in was evicted (its pool's wait doubles) or
        finished / held its GPUs for H (halves); :func:`policies.quota.guard_backoff`."""
        pool = self._guard_admitted.pop(tid, None)
        if pool is None:
            return
        if spot_guard_counts_all_starts(self.cfg.spot_guard):  # '_bkall' halves by quiet time only
            if evicted:
                self._guard_factor[pool] = guard_backoff(float(self._guard_factor[pool]), True)
                self._guard_quiet_since[pool] = self.now
            return
        self._guard_factor[pool] = guard_backoff(float(self._guard_factor[pool]), evicted)

    def _hp_react_cap(self, pool: int, quota: float | None) -> float:
        """``hp_react='queued'``: the pool's quota is at most C - (GPUs of running HP + GPUs
        queued HP tasks ask of it), so that no spot task starts on GPUs a queued HP task waits for."""
        held = float(self.hp_running[pool].sum() + max(self.hp_queued[pool].sum(), 0.0))
        cap = max(float(self.pool_cap[pool]) - held, 0.0)
        return cap if quota is None else min(quota, cap)

    def _release_leases(self) -> None:
        """Chronus as released: every running task gives its GPUs back and queues again; it
        keeps its progress and pays ``lease_restart_s`` when it starts again."""
        for tid in list(self.running):
            rt = self._release(tid)
            rec = self.records[tid]
            rec.remaining_s = max(rec.remaining_s - (self.now - rt.started_s), 0.0) + self.cfg.lease_restart_s
            rec.epoch += 1
            rec.lease_restart = True
            self._enqueue(tid, self.now)

    def _check(self) -> None:
        used = np.zeros_like(self.card_free)
        for rt in self.running.values():
            for n, c, s in rt.cards:
                used[n, c] += s
        cap = (np.arange(self.card_free.shape[1])[None, :] < self.gpus[:, None]).astype(float)
        if not np.allclose(cap - used, self.card_free, atol=1e-6) or np.any(used > cap + 1e-6):
            raise RuntimeError("GPU accounting broken: a card is double-booked or leaked")

    # ---- results -------------------------------------------------------------------------
    def _class(self, hp: bool) -> ClassMetrics:
        recs = [r for r in self.records.values()
                if r.task.request.is_hp == hp and r.task.submit_s >= self.cfg.measure_from_s]
        done = [r for r in recs if r.finished]
        jct = np.array([r.finish_s - r.task.submit_s for r in done])
        jqt = np.array([r.jqt_s for r in done])
        return ClassMetrics(len(recs), len(done), float(jct.mean()) if len(jct) else 0.0,
                            float(np.percentile(jct, 99)) if len(jct) else 0.0,
                            float(jqt.mean()) if len(jqt) else 0.0,
                            sum(r.runs for r in recs), sum(r.evictions for r in recs),
                            sum(r.guarantee_hours for r in recs), len(done))

    def _result(self) -> SimResult:
        span = self.last_arrival - self.first_arrival
        alloc = self._alloc_area / (self.total * span) if span > 0 and self.total > 0 else 0.0
        return SimResult(self.s.name, self.w.name, self._class(True), self._class(False), alloc, self.now,
                         self.calls, self.records, self.preemption, self.quota_stats)


def simulate(workload: Workload, scheduler: FrameworkScheduler, config: SimConfig | None = None) -> SimResult:
    """Run ``scheduler`` over ``workload`` (see :class:`GpuSimulator`)."""
    return GpuSimulator(workload, scheduler, config).run()
