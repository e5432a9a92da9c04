"""GFS, its ablations (paper 002 Sec. 4.6) and the baselines of Sec. 4.1 as plugin sets.

``make_scheduler(name)`` returns a :class:`policies.placement.FrameworkScheduler`; every one of
them answers ``schedule(snapshot, task) -> Placement | None`` and carries its queue rule
(``.queue``), its spot-quota rule (``.quota``, GFS family only) and, for Chronus, the lease
period at whose ends it may preempt (``.preempt_every_s``).

=========  =====================================================================================
gfs        filters: GPU model, capacity, circuit breaker; scores Eq. 13 > 14 > 15-16; Alg. 2
           preemption (waste order Eq. 17, node cost Eq. 19, every node costed); queue by GPUs
           per pod, pods, submission (Sec. 3.4.2); quota with OrgLinear
gfs_e      GFS with the last-week-peak estimator in the quota (Table 8)
gfs_d      GFS with eta fixed at 1.0 (Table 9)
gfs_s      GFS with packing only (best fit; no co-location, no eviction awareness) (Table 10)
gfs_p      GFS with random node / victim selection in preemption (Table 10)
gfs_sp     both degradations (Table 10)
yarn_cs    strict FCFS per priority, best fit, preemption of the newest spot tasks on the first
           node where that frees enough
chronus    leases (20 min HP, 5 min spot): preemption only at spot lease ends (multiples of
           300 s), best fit, FCFS with backfill
chronus_rel Chronus as its authors' simulator runs it: the above, and every 1,200 s every running
           task gives its lease back and queues again (120 s restart cost, ``SimConfig``)
lyra       first fit ("inefficient scoring"), preemption that minimises lost work (GPU-seconds
           since the victims' starts: Lyra assumes no checkpoints), FCFS with backfill
fgd        fragmentation-aware placement (FGD adapted from in-card to in-node), YARN-style
           preemption, FCFS with backfill
=========  =====================================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, cast

import numpy as np

from controlplane.core.errors import InvalidInput
from policies.gfs_options import LIVE_DEFAULT
from policies.placement import (
    EPS,
    CapacityFilter,
    CircuitBreakerFilter,
    ClusterSnapshot,
    CoLocationScore,
    EvictionScore,
    FilterPlugin,
    FragmentationScore,
    FrameworkScheduler,
    GpuModelFilter,
    PackingScore,
    Preemptor,
    QueueOrder,
    QueueRule,
    QuotaRule,
    ScorePlugin,
    TaskRequest,
    WorkState,
    gfs_node_cost,
    keep_by_lost_work,
    keep_by_waste,
    keep_oldest,
    lost_work_cost,
)

SCHEDULERS = ("gfs", "yarn_cs", "chronus", "chronus_rel", "lyra", "fgd", "gfs_e", "gfs_d", "gfs_s", "gfs_p",
              "gfs_sp")
BASELINES = ("yarn_cs", "chronus", "chronus_rel", "lyra", "fgd")
#: The baselines the authors' release runs behind GFS's spot quota (``quota=True``).
QUOTA_BASELINES = ("yarn_cs", "lyra", "fgd")
ABLATIONS = ("gfs_e", "gfs_d", "gfs_s", "gfs_p", "gfs_sp")
#: GFS's queue order (Sec. 3.4.2 names the keys, not their directions): ``size`` ascending GPUs
#: per pod and pods; ``size_release`` the authors' release (descending GPUs per pod); ``fcfs``
#: submission order with backfill (the baselines' queue, a robustness variant).
GFS_QUEUES = ("size", "size_release", "fcfs")
#: Which nodes Alg. 2 tries for an HP pod of whole GPUs (``Preemptor.reach``), for every scheduler.
PREEMPT_REACHES = ("cards", "spot_share", "whole_node")

#: Chronus lease lengths (paper Sec. 4.1): HP (SLO) 20 min, spot (best-effort) 5 min.
CHRONUS_HP_LEASE_S = 1200.0
CHRONUS_SPOT_LEASE_S = 300.0
#: Chronus as released: the restart cost a task pays after each lease release.
CHRONUS_RESTART_S = 120.0


@dataclass(frozen=True)
class FirstFitScore:
    """No preference: the lowest-index feasible node wins (first fit)."""

    name: str = "first_fit"

    def score(self, snap: ClusterSnapshot, task: TaskRequest, work: WorkState) -> np.ndarray:
        return np.zeros(snap.n_nodes)


def _gfs(name: str, *, full_scores: bool = True, smart_preempt: bool = True,
         quota: QuotaRule | None = None, beta: float = 0.5, gamma: float = 0.8, m: float = 3.0,
         seed: int = 0) -> FrameworkScheduler:
    filters: tuple = (GpuModelFilter(), CapacityFilter())
    scores: tuple = (PackingScore(),)
    if full_scores:
        filters += (CircuitBreakerFilter(gamma=gamma, m=m),)
        scores += (CoLocationScore(), EvictionScore(gamma=gamma, m=m))
    if smart_preempt:
        pre = Preemptor(keep=keep_by_waste, cost=lambda s, v: gfs_node_cost(s, v, beta=beta))
    else:
        pre = Preemptor(node_choice="random", random_victims=True, seed=seed)
    return FrameworkScheduler(name, filters, scores, pre, QueueRule("size", strict=False),
                              quota or QuotaRule(), seed=seed)


@dataclass(frozen=True)
class SpotOnlyScore:
    """A score plugin that ranks spot tasks' nodes only (HP tasks see a tie everywhere)."""

    inner: ScorePlugin
    name: str = "spot_only"

    def score(self, snap: ClusterSnapshot, task: TaskRequest, work: WorkState) -> np.ndarray:
        return np.zeros(snap.n_nodes) if task.is_hp else np.asarray(self.inner.score(snap, task, work))


@dataclass(frozen=True)
class HpOnlyScore:
    """A score plugin that ranks HP tasks' nodes only (spot tasks see a tie everywhere)."""

    inner: ScorePlugin
    name: str = "hp_only"

    def score(self, snap: ClusterSnapshot, task: TaskRequest, work: WorkState) -> np.ndarray:
        return np.asarray(self.inner.score(snap, task, work)) if task.is_hp else np.zeros(snap.n_nodes)


@dataclass(frozen=True)
class HpHeldScore:
    """1 on the nodes where HP holds GPUs, else 0: spot pods placed there first leave the nodes
    free of HP whole for HP pods of a whole node (best fit, Eq. 13, breaks the tie)."""

    name: str = "hp_held"

    def score(self, snap: ClusterSnapshot, task: TaskRequest, work: WorkState) -> np.ndarray:
        return (np.asarray(work.hp) > EPS).astype(float)


def with_plugin(scheduler: FrameworkScheduler, *, filter: FilterPlugin | None = None,
                score: ScorePlugin | None = None) -> FrameworkScheduler:
    """A copy of the scheduler with one more filter and/or score plugin (the score as the last,
    tie-breaking key); the scheduler itself is not changed."""
    return replace(scheduler, filters=scheduler.filters + ((filter,) if filter else ()),
                   scores=scheduler.scores + ((score,) if score else ()))


def make_scheduler(name: str, *, seed: int = 0, quota: bool = False, gfs_queue: str = LIVE_DEFAULT.queue,
                   spot_score: str = LIVE_DEFAULT.spot_score, hp_score: str = LIVE_DEFAULT.hp_score,
                   preempt_reach: str = LIVE_DEFAULT.preempt_reach,
                   hp_pack: str = LIVE_DEFAULT.hp_pack) -> FrameworkScheduler:
    """One of :data:`SCHEDULERS` by name (see the module table); ``quota=True`` puts a baseline
    behind GFS's spot quota (OrgLinear, adaptive eta), as the authors' release runs them;
    ``gfs_queue`` (one of :data:`GFS_QUEUES`) is the queue order of GFS and its ablations;
    ``spot_score='fragmentation'`` ranks GFS's nodes for spot tasks by FGD's fragmentation score
    before Eq. 13-16 (HP placement unchanged), ``'hp_nodes_first'`` by whether HP holds GPUs there; ``hp_score='hp_colocate'`` ranks GFS's nodes for HP
    tasks by Eq. 14 (GPUs HP already holds) before Eq. 13, so that small HP pods gather on the nodes
    HP already uses and leave nodes that hold only spot (preemptible) whole for HP gangs;
    ``preempt_reach`` is the bound of Alg. 2 for every scheduler that preempts (GFS and the
    baselines alike, :class:`policies.placement.Preemptor`, ``reach``): ``'cards'`` tries every node
    whose cards HP does not hold, as the release does, ``'spot_share'`` only those with idle + spot
    GPUs enough, ``'whole_node'`` the first only for a pod that fills a node;
    ``hp_pack='hp_nodes'`` sends GFS's HP pods smaller than a node to the nodes HP holds first,
    evicting spot there if it must (``FrameworkScheduler.hp_pack_first``)."""
    if gfs_queue not in GFS_QUEUES:
        raise InvalidInput("gfs_queue", f"unknown queue order {gfs_queue!r}", fix=f"use one of {', '.join(GFS_QUEUES)}")
    if preempt_reach not in PREEMPT_REACHES:
        raise InvalidInput("preempt_reach", f"unknown bound {preempt_reach!r}",
                           fix=f"use one of {', '.join(PREEMPT_REACHES)}")
    s = _make(name, seed)
    if quota and s.quota is None:
        s.quota = QuotaRule()
    if s.preemptor is not None:
        s.preemptor = replace(s.preemptor, reach=cast(Literal["cards", "spot_share", "whole_node"], preempt_reach))
    if name == "gfs" or name in ABLATIONS:
        s.queue = QueueRule(cast(QueueOrder, gfs_queue), strict=False)
        if spot_score == "fragmentation":
            s.scores = (SpotOnlyScore(FragmentationScore()), *s.scores)
        elif spot_score == "hp_nodes_first":
            s.scores = (SpotOnlyScore(HpHeldScore()), *s.scores)
        elif spot_score != "packing":
            raise InvalidInput("spot_score", f"unknown spot score {spot_score!r}",
                               fix="use packing, fragmentation or hp_nodes_first")
        if hp_score == "hp_colocate":
            s.scores = (HpOnlyScore(CoLocationScore()), *s.scores)
        elif hp_score != "packing":
            raise InvalidInput("hp_score", f"unknown HP score {hp_score!r}", fix="use packing or hp_colocate")
        if hp_pack not in ("off", "hp_nodes"):
            raise InvalidInput("hp_pack", f"unknown HP packing {hp_pack!r}", fix="use off or hp_nodes")
        s.hp_pack_first = hp_pack == "hp_nodes"
    return s


def _make(name: str, seed: int) -> FrameworkScheduler:
    basic = (GpuModelFilter(), CapacityFilter())
    if name == "gfs":
        return _gfs(name, seed=seed)
    if name == "gfs_e":
        return _gfs(name, quota=QuotaRule("last_week_peak", True), seed=seed)
    if name == "gfs_d":
        return _gfs(name, quota=QuotaRule("orglinear", adapt_eta=False), seed=seed)
    if name == "gfs_s":
        return _gfs(name, full_scores=False, seed=seed)
    if name == "gfs_p":
        return _gfs(name, smart_preempt=False, seed=seed)
    if name == "gfs_sp":
        return _gfs(name, full_scores=False, smart_preempt=False, seed=seed)
    if name == "yarn_cs":
        return FrameworkScheduler(name, basic, (PackingScore(),), Preemptor(keep_oldest, node_choice="first"),
                                  QueueRule("fcfs", strict=True), None, seed=seed)
    if name == "chronus":
        return FrameworkScheduler(name, basic, (PackingScore(),), Preemptor(keep_oldest, node_choice="first"),
                                  QueueRule("fcfs", strict=False), None,
                                  preempt_every_s=CHRONUS_SPOT_LEASE_S, seed=seed)
    if name == "chronus_rel":
        return FrameworkScheduler(name, basic, (PackingScore(),), Preemptor(keep_oldest, node_choice="first"),
                                  QueueRule("fcfs", strict=False), None, preempt_every_s=CHRONUS_SPOT_LEASE_S,
                                  lease_release_s=CHRONUS_HP_LEASE_S, seed=seed)
    if name == "lyra":
        return FrameworkScheduler(name, basic, (FirstFitScore(),),
                                  Preemptor(keep_by_lost_work, lost_work_cost, node_choice="min_cost"),
                                  QueueRule("fcfs", strict=False), None, seed=seed)
    if name == "fgd":
        return FrameworkScheduler(name, basic, (FragmentationScore(), PackingScore()),
                                  Preemptor(keep_oldest, node_choice="first"),
                                  QueueRule("fcfs", strict=False), None, seed=seed)
    raise InvalidInput("scheduler", f"unknown scheduler {name!r}", fix=f"use one of {', '.join(SCHEDULERS)}")
