"""GFS preemptive task scheduler (PTS, paper 002 Sec. 3.4, Eq. 13-19, Algorithms 1-3).

Structured like the Kubernetes scheduling framework over an immutable :class:`ClusterSnapshot`:

* **Filter** plugins say which nodes can take the next pod: :class:`CapacityFilter`,
  :class:`GpuModelFilter`, :class:`CircuitBreakerFilter` (Eq. 16's ``Score3 = 0`` blacklist for
  spot tasks). Gang scheduling (all ``w`` pods or none) is the framework's transaction: pods are
  placed one by one on a private copy of the free-GPU arrays and nothing is returned unless all
  ``w`` fit (:class:`GangPreFilter` rejects hopeless gangs before the loop).
* **Score** plugins give one key per node, applied lexicographically in the paper's order
  (Algorithm 1 line 8: ``<Score1, Score2, Score3>`` descending): :class:`PackingScore` (Eq. 13),
  :class:`CoLocationScore` (Eq. 14), :class:`EvictionScore` (Eq. 15-16).
* **PostFilter** preemption for HP tasks (:class:`Preemptor`, Algorithm 2): waste-aware victim
  choice (Eq. 17) and the node cost of Eq. 19. Spot tasks are never placed by preemption.
* :class:`FrameworkScheduler` ties them together with the spot-quota check (Algorithm 3).

How the three criteria combine (checked against Sec. 3.4.2): strict priority, not a weighted sum.
Algorithm 1 line 12 sorts by ``<Score1, Score2, Score3>`` descending, the text applies the criteria
"sequentially ... to refine this set", Criterion 2 acts "under Criterion 1" and Criterion 3 only
"when Criterion (1) and (2) fail to differentiate candidate nodes". Eq. 13 on whole-node GPU counts
is already discrete (S + 1 levels), so co-location decides among nodes with equal idle cards;
``Norm`` does not change a lexicographic order. The queue key is g, w, submission (Sec. 3.4.2).

Fractional GPUs (``0 < g < 1``) share one card; whole-GPU pods take whole idle cards of one node.

Slips in the paper, corrected here:

* Eq. 16's ``Norm`` cannot be a min-max normalisation over candidates: the worst node would
  always score 0 and be circuit-broken even with no evictions at all. ``Norm`` is read as a clip
  to ``[0, 1]``, so ``Score3_spot = max(1 - 0.01 m^e, 0)`` reaches 0 (the breaker) once
  ``e >= log_m(100)`` (4.2 weighted evictions for m = 3). Eq. 13-14 are already in ``[0, 1]``.
* Eq. 17 writes ``g_{tau_j}``; it is the victim's own GPUs, ``g_{tau_s}`` (all its pods).
* Eq. 19's ``T`` is Eq. 12's scheduling horizon, not given in numbers; it is ``usage_window_s``
  (default one week). With so long a T the usage term only breaks ties between nodes that need
  the same number of victims, which is what Eq. 12's first objective (the eviction rate) asks.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from controlplane.core.errors import InvalidInput

log = logging.getLogger(__name__)

Priority = Literal["hp", "spot"]
EPS = 1e-9
FloatArray = np.ndarray
BoolArray = np.ndarray


# ---------------------------------------------------------------------------------------------
# requests, running tasks, placements
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskRequest:
    """One task: ``pods`` pods (gang width w) of ``gpus`` GPUs each (g < 1 = a share of a card)."""

    id: str
    priority: Priority
    gpus: float
    pods: int = 1
    gpu_model: tuple[str, ...] | None = None
    tenant: str = "default"
    expected_hours: float | None = None  # how long it is expected to run (None: unknown)

    def __post_init__(self) -> None:
        if self.priority not in ("hp", "spot"):
            raise InvalidInput("priority", f"must be 'hp' or 'spot', got {self.priority!r}",
                               fix="use 'hp' for non-preemptible tasks, 'spot' otherwise")
        if not (self.gpus > 0) or math.isinf(self.gpus):
            raise InvalidInput("gpus", f"must be > 0, got {self.gpus}", fix="ask for 0.5, 1, 2, 4 or 8")
        if self.gpus > 1 and abs(self.gpus - round(self.gpus)) > EPS:
            raise InvalidInput("gpus", f"above 1 must be a whole number of cards, got {self.gpus}",
                               fix="round up to whole GPUs or split into pods")
        if self.pods < 1:
            raise InvalidInput("pods", f"gang width must be >= 1, got {self.pods}", fix="use 1+")
        if isinstance(self.gpu_model, str):
            object.__setattr__(self, "gpu_model", tuple(m for m in self.gpu_model.split("|") if m) or None)

    @property
    def total_gpus(self) -> float:
        return self.gpus * self.pods

    @property
    def is_hp(self) -> bool:
        return self.priority == "hp"

    @property
    def shape(self) -> tuple[str, float, int, tuple[str, ...] | None]:
        """Tasks of one shape fail or fit together on an unchanged cluster (queue memo)."""
        return (self.priority, self.gpus, self.pods, self.gpu_model)


@dataclass(frozen=True)
class RunningTask:
    """A task holding cards: ``cards`` = (node, card, share) triples over all its pods."""

    id: str
    priority: Priority
    gpus: float
    pods: int
    cards: tuple[tuple[int, int, float], ...]
    started_s: float
    checkpoint_every_s: float = 3600.0
    tenant: str = "default"
    checkpointed_s: float | None = None  # the last checkpoint's time, where it is known (live jobs)

    @property
    def total_gpus(self) -> float:
        return self.gpus * self.pods

    def last_checkpoint_s(self, now_s: float) -> float:
        """Time of the last checkpoint of this run: ``checkpointed_s`` where known, else the last
        multiple of ``checkpoint_every_s`` since the start (its start when none was taken yet)."""
        if self.checkpointed_s is not None:
            return min(self.checkpointed_s, now_s)
        if not math.isfinite(self.checkpoint_every_s) or self.checkpoint_every_s <= 0:
            return self.started_s
        done = math.floor(max(0.0, now_s - self.started_s) / self.checkpoint_every_s)
        return self.started_s + done * self.checkpoint_every_s

    def waste(self, now_s: float) -> float:
        """Eq. 17: GPU-seconds lost if evicted now, ``g * (t - t_check)``."""
        return self.total_gpus * max(0.0, now_s - self.last_checkpoint_s(now_s))


@dataclass(frozen=True)
class PodPlacement:
    node: int
    node_name: str
    cards: tuple[tuple[int, float], ...]  # (card index, share)


@dataclass(frozen=True)
class Placement:
    """Where each pod goes and which spot tasks must be evicted first."""

    task_id: str
    pods: tuple[PodPlacement, ...]
    victims: tuple[str, ...] = ()

    @property
    def preemptive(self) -> bool:
        return bool(self.victims)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(p.node_name for p in self.pods)


# ---------------------------------------------------------------------------------------------
# snapshot
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class NodeAges:
    """Per node: its VM's age in hours (NaN: no VM yet, a launch would make a fresh one) and the
    key of its lifetime model ('' : never preempted); ``fresh`` is the key of a new VM's model."""

    hours: np.ndarray
    model: np.ndarray
    fresh: str = ""


def _ro(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


@dataclass(frozen=True, eq=False)
class ClusterSnapshot:
    """Immutable view of the cluster at ``now_s`` (arrays are read-only views).

    ``card_free[n, c]`` is the free share of card c on node n (1 = idle, padding cards = 0).
    ``spot_succeeded`` / ``spot_evicted`` are G and F of Eq. 18-19. ``spot_quota`` is Eq. 10's
    Q_H (None = no quota) and ``spot_allocated`` the GPUs spot tasks hold now; ``spot_nodes``
    (None = all) masks the nodes whose GPU pool's quota has room for the spot task asked about.
    ``reserved_nodes`` (None = none) are held for the HP task ``reserved_for``: no other task is
    placed there.
    """

    now_s: float
    node_names: np.ndarray
    gpu_model: np.ndarray
    gpus: np.ndarray
    card_free: np.ndarray
    hp_gpus: np.ndarray
    spot_gpus: np.ndarray
    evictions_short: np.ndarray
    evictions_long: np.ndarray
    running: Mapping[str, RunningTask] = field(default_factory=lambda: MappingProxyType({}))
    node_tasks: Mapping[int, Mapping[str, None] | Sequence[str]] = field(
        default_factory=lambda: MappingProxyType({}))
    spot_succeeded: int = 0
    spot_evicted: int = 0
    spot_quota: float | None = None
    spot_allocated: float = 0.0
    idle_cards: np.ndarray | None = None
    free_gpus: np.ndarray | None = None
    spot_nodes: np.ndarray | None = None
    ages: NodeAges | None = None  # VM ages, for plugins that weigh a node's age (None: unknown)
    _memo: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)
    reserved_nodes: np.ndarray | None = None
    reserved_for: str | None = None

    def __post_init__(self) -> None:
        if _all_read_only(self):
            return  # trusted: built from read-only views by a simulator that keeps them consistent
        n = len(self.node_names)
        for name in ("gpu_model", "gpus", "hp_gpus", "spot_gpus", "evictions_short", "evictions_long"):
            a = np.asarray(getattr(self, name))
            if a.shape != (n,):
                raise InvalidInput(name, f"must have one entry per node ({n}), got {a.shape}",
                                   fix="build every per-node array from the same node list")
        if self.card_free.ndim != 2 or self.card_free.shape[0] != n:
            raise InvalidInput("card_free", f"must be [nodes, cards], got {self.card_free.shape}",
                               fix="one row per node, padded with 0 past the node's GPUs")
        if self.idle_cards is None:
            object.__setattr__(self, "idle_cards", (self.card_free >= 1 - EPS).sum(axis=1))
        if self.free_gpus is None:
            object.__setattr__(self, "free_gpus", self.card_free.sum(axis=1))
        for name in _ARRAYS:
            object.__setattr__(self, name, _ro(np.asarray(getattr(self, name))))

    @classmethod
    def empty(cls, node_names: Sequence[str], gpu_model: Sequence[str], gpus: Sequence[int],
              now_s: float = 0.0) -> ClusterSnapshot:
        """An idle cluster (for the control plane's first call and for tests)."""
        g = np.asarray(gpus, dtype=np.int64)
        cmax = int(g.max()) if len(g) else 1
        card_free = (np.arange(cmax)[None, :] < g[:, None]).astype(float)
        z = np.zeros(len(g))
        return cls(now_s, np.asarray(node_names), np.asarray(gpu_model), g, card_free, z, z, z, z)

    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    def weighted_evictions(self, gamma: float) -> np.ndarray:
        """Eq. 15 per node (memoised: the breaker and the score both need it)."""
        key = f"ebar:{gamma}"
        e = self._memo.get(key)
        if e is None:
            e = weighted_evictions(self.evictions_short, self.evictions_long, gamma)
            self._memo[key] = e
        return e

    def spot_tasks_on(self, node: int) -> list[RunningTask]:
        ids = self.node_tasks.get(node, ())
        out = []
        for i in ids:
            t = self.running.get(i)
            if t is not None and t.priority == "spot":
                out.append(t)
        return out


_ARRAYS = ("node_names", "gpu_model", "gpus", "card_free", "hp_gpus", "spot_gpus", "evictions_short",
           "evictions_long", "idle_cards", "free_gpus")


def _all_read_only(snap: ClusterSnapshot) -> bool:
    for name in _ARRAYS:
        a = getattr(snap, name)
        if not isinstance(a, np.ndarray) or a.flags.writeable:
            return False
    return True


# ---------------------------------------------------------------------------------------------
# per-call working state: a private copy of the free-card arrays for the gang transaction
# ---------------------------------------------------------------------------------------------
class WorkState:
    """Free cards as pods get placed (virtually): copies only what a placement touches."""

    def __init__(self, snap: ClusterSnapshot) -> None:
        assert snap.idle_cards is not None and snap.free_gpus is not None
        self.snap = snap
        self.idle = snap.idle_cards.astype(float)
        self.free = snap.free_gpus.copy()
        self.hp = snap.hp_gpus.copy()
        self.spot = snap.spot_gpus.copy()
        self.rows: dict[int, np.ndarray] = {}
        self._max_free: np.ndarray | None = None
        self.evicted: set[str] = set()

    def row(self, node: int) -> np.ndarray:
        r = self.rows.get(node)
        if r is None:
            r = self.snap.card_free[node].copy()
            self.rows[node] = r
        return r

    @property
    def max_free(self) -> np.ndarray:
        if self._max_free is None:
            self._max_free = self.snap.card_free.max(axis=1)
            for n, r in self.rows.items():
                self._max_free[n] = r.max()
        return self._max_free

    def _refresh(self, node: int) -> None:
        r = self.rows[node]
        self.idle[node] = float((r >= 1 - EPS).sum())
        self.free[node] = float(r.sum())
        if self._max_free is not None:
            self._max_free[node] = r.max()

    def take(self, node: int, gpus: float, hp: bool) -> tuple[tuple[int, float], ...]:
        r = self.row(node)
        cards = pick_cards(r, gpus)
        if cards is None:
            raise RuntimeError(f"node {node} cannot hold {gpus} GPUs")  # a filter bug
        for c, s in cards:
            r[c] -= s
        (self.hp if hp else self.spot)[node] += gpus
        self._refresh(node)
        return cards

    def evict(self, task: RunningTask) -> None:
        if task.id in self.evicted:
            return
        self.evicted.add(task.id)
        per_node: dict[int, float] = {}
        for n, c, s in task.cards:
            self.row(n)[c] += s
            per_node[n] = per_node.get(n, 0.0) + s
        for n, s in per_node.items():
            (self.hp if task.priority == "hp" else self.spot)[n] -= s
            self._refresh(n)


def pick_cards(row: np.ndarray, gpus: float) -> tuple[tuple[int, float], ...] | None:
    """Cards for one pod: ``g`` whole idle cards, or the fullest card with ``g`` free (g < 1)."""
    if gpus >= 1 - EPS:
        idle = np.flatnonzero(row >= 1 - EPS)
        k = int(round(gpus))
        if len(idle) < k:
            return None
        return tuple((int(c), 1.0) for c in idle[:k])
    ok = np.flatnonzero(row >= gpus - EPS)
    if len(ok) == 0:
        return None
    c = int(ok[np.argmin(row[ok])])
    return ((c, float(gpus)),)


def fits(row: np.ndarray, gpus: float) -> bool:
    if gpus >= 1 - EPS:
        return int((row >= 1 - EPS).sum()) >= int(round(gpus))
    return bool(row.max() >= gpus - EPS)


# ---------------------------------------------------------------------------------------------
# plugins
# ---------------------------------------------------------------------------------------------
class FilterPlugin(Protocol):
    """``filter`` returns the feasible nodes, or None when the plugin rules nothing out."""

    @property
    def name(self) -> str: ...

    def filter(self, snap: ClusterSnapshot, task: TaskRequest, work: WorkState) -> BoolArray | None: ...


@runtime_checkable
class PodFilterPlugin(Protocol):
    """A Filter asked again before every pod of a gang, as the pods placed so far take capacity;
    the framework asks every other filter once per task."""

    @property
    def name(self) -> str: ...

    def pod_filter(self, task: TaskRequest, work: WorkState) -> BoolArray: ...


class ScorePlugin(Protocol):
    @property
    def name(self) -> str: ...

    def score(self, snap: ClusterSnapshot, task: TaskRequest, work: WorkState) -> FloatArray: ...


@dataclass(frozen=True)
class CapacityFilter:
    """Enough free GPUs for one pod: g idle cards, or one card with g free (g < 1)."""

    name: str = "capacity"

    def filter(self, snap: ClusterSnapshot, task: TaskRequest, work: WorkState) -> BoolArray | None:
        return self.mask(task, work)

    def pod_filter(self, task: TaskRequest, work: WorkState) -> BoolArray:
        return self.mask(task, work)

    @staticmethod
    def mask(task: TaskRequest, work: WorkState) -> BoolArray:
        if task.gpus >= 1 - EPS:
            result: BoolArray = work.idle >= round(task.gpus)
        else:
            result = work.max_free >= task.gpus - EPS
        return result


@dataclass(frozen=True)
class GpuModelFilter:
    """Only nodes of the task's GPU models (any model when the task names none)."""

    name: str = "gpu_model"

    def filter(self, snap: ClusterSnapshot, task: TaskRequest, work: WorkState) -> BoolArray | None:
        if not task.gpu_model:
            return None
        key = "model:" + "|".join(task.gpu_model)
        m = snap._memo.get(key)
        if m is None:
            m = np.isin(snap.gpu_model, task.gpu_model)
            snap._memo[key] = m
        return m


def weighted_evictions(short: np.ndarray | float, long: np.ndarray | float, gamma: float = 0.8,
                       long_hours: float = 24.0) -> np.ndarray:
    """Eq. 15: e = gamma * e_short + (1 - gamma) * e_long / T_long (T_long in hours)."""
    return gamma * np.asarray(short, dtype=float) + (1 - gamma) * np.asarray(long, dtype=float) / long_hours


def eviction_score(e_bar: np.ndarray | float, hp: bool, m: float = 3.0) -> np.ndarray:
    """Eq. 16 with Norm = clip to [0, 1]: HP min(0.01 m^e, 1), spot max(1 - 0.01 m^e, 0)."""
    x = 0.01 * np.power(m, np.asarray(e_bar, dtype=float))
    return np.minimum(x, 1.0) if hp else np.maximum(1.0 - x, 0.0)


@dataclass(frozen=True)
class CircuitBreakerFilter:
    """Spot tasks of whole GPUs skip nodes whose eviction score (Eq. 16) is 0 (Algorithm 1 line 9;
    fractional pods, line 7, filter on available GPUs only)."""

    gamma: float = 0.8
    m: float = 3.0
    name: str = "circuit_breaker"

    def filter(self, snap: ClusterSnapshot, task: TaskRequest, work: WorkState) -> BoolArray | None:
        if task.is_hp or task.gpus < 1 - EPS:
            return None  # Alg. 1 lines 6-9: the Score3 > 0 filter is on the whole-GPU branch only
        threshold = math.log(100.0) / math.log(self.m)  # 1 - 0.01 m^e > 0  <=>  e < log_m(100)
        return snap.weighted_evictions(self.gamma) < threshold


@dataclass(frozen=True)
class PackingScore:
    """Criterion 1, Eq. 13: 1 - idleGPUs/totalGPUs (prefer the fullest node that fits: best fit).

    Whole-GPU pods count idle (whole, unused) cards as Eq. 13 says; fractional pods count the
    available GPUs (Alg. 1 line 7), so that they fill partly used cards first.
    """

    name: str = "packing"

    def score(self, snap: ClusterSnapshot, task: TaskRequest, work: WorkState) -> FloatArray:
        free = work.idle if task.gpus >= 1 - EPS else work.free
        return 1.0 - free / np.maximum(snap.gpus, 1)


@dataclass(frozen=True)
class CoLocationScore:
    """Criterion 2, Eq. 14: hpGPUs/total for HP tasks, spotGPUs/total for spot tasks."""

    name: str = "co_location"

    def score(self, snap: ClusterSnapshot, task: TaskRequest, work: WorkState) -> FloatArray:
        own = work.hp if task.is_hp else work.spot
        return own / np.maximum(snap.gpus, 1)


@dataclass(frozen=True)
class EvictionScore:
    """Criterion 3, Eq. 15-16: spot tasks avoid, HP tasks seek, nodes with past evictions."""

    gamma: float = 0.8
    m: float = 3.0
    name: str = "eviction"

    def score(self, snap: ClusterSnapshot, task: TaskRequest, work: WorkState) -> FloatArray:
        return eviction_score(snap.weighted_evictions(self.gamma), hp=task.is_hp, m=self.m)


@dataclass(frozen=True)
class FragmentationScore:
    """FGD (Weng et al., ATC'23) adapted to whole nodes: minimise the growth of fragmentation.

    A node's fragmentation for a workload mix is the expected number of its free GPUs that a
    request drawn from the mix could not use (the request needs more free cards than are left).
    The score is minus the increase caused by placing the pod there.
    """

    mix: tuple[tuple[float, float], ...] = ((1.0, 0.6), (2.0, 0.12), (4.0, 0.1), (8.0, 0.18))
    name: str = "fragmentation"

    def _frag(self, free: np.ndarray) -> np.ndarray:
        out = np.zeros_like(free)
        for g, p in self.mix:
            out += p * np.where(free < g - EPS, free, 0.0)
        return out

    def score(self, snap: ClusterSnapshot, task: TaskRequest, work: WorkState) -> FloatArray:
        before = self._frag(work.idle)
        after = self._frag(np.maximum(work.idle - max(task.gpus, 1.0) * (task.gpus >= 1 - EPS), 0.0))
        return -(after - before)


@dataclass(frozen=True)
class RandomScore:
    """A random key per node (seeded by the task id): the ablations' random selection."""

    seed: int = 0
    name: str = "random"

    def score(self, snap: ClusterSnapshot, task: TaskRequest, work: WorkState) -> FloatArray:
        rng = np.random.default_rng([self.seed, _stable_hash(task.id), len(work.evicted)])
        return rng.random(snap.n_nodes)


def _stable_hash(s: str) -> int:
    h = 2166136261
    for ch in s.encode():
        h = ((h ^ ch) * 16777619) & 0xFFFFFFFF
    return h


@dataclass(frozen=True)
class GangPreFilter:
    """Reject a gang early when the feasible nodes cannot hold all w pods even together."""

    name: str = "gang"

    def feasible(self, task: TaskRequest, work: WorkState, mask: BoolArray) -> bool:
        if task.pods == 1:
            return bool(mask.any())
        if task.gpus >= 1 - EPS:
            slots = np.floor(work.idle[mask] / round(task.gpus)).sum()
        else:
            slots = np.floor(work.free[mask] / task.gpus).sum()
        return bool(slots >= task.pods)


def best_node(candidates: np.ndarray, keys: Sequence[np.ndarray]) -> int:
    """Lexicographic argmax over the score keys (first key first); ties go to the lowest index."""
    idx = candidates
    for k in keys:
        if len(idx) == 1:
            break
        v = k[idx]
        idx = idx[v >= v.max() - 1e-12]
    return int(idx[0])


# ---------------------------------------------------------------------------------------------
# preemption (Algorithm 2)
# ---------------------------------------------------------------------------------------------
KeepOrder = Callable[[RunningTask, float], float]
NodeCost = Callable[[ClusterSnapshot, Sequence[RunningTask]], float]


def keep_by_waste(t: RunningTask, now_s: float) -> float:
    """GFS: keep the tasks that would waste most (Eq. 17), i.e. evict the cheap ones."""
    return t.waste(now_s)


def keep_oldest(t: RunningTask, now_s: float) -> float:
    """YARN-CS: evict the most recently started containers first."""
    return -t.started_s


def keep_by_lost_work(t: RunningTask, now_s: float) -> float:
    """Lyra: keep the tasks with most work since their start (no checkpoint awareness)."""
    return t.total_gpus * max(0.0, now_s - t.started_s)


def gfs_node_cost(snap: ClusterSnapshot, victims: Sequence[RunningTask], beta: float = 0.5,
                  usage_window_s: float = 7 * 86400.0) -> float:
    """Eq. 19: (F + |T_k|) / (G + F + |T_k|) + beta * sum(waste) / (sum_k S_k * T)."""
    f, g, k = snap.spot_evicted, snap.spot_succeeded, len(victims)
    rate = (f + k) / (g + f + k) if (g + f + k) > 0 else 0.0
    total = float(snap.gpus.sum()) * usage_window_s
    usage = sum(v.waste(snap.now_s) for v in victims) / total if total > 0 else 0.0
    return rate + beta * usage


def lost_work_cost(snap: ClusterSnapshot, victims: Sequence[RunningTask]) -> float:
    """Lyra's preemption cost: GPU-seconds of work since the victims' starts."""
    return sum(keep_by_lost_work(v, snap.now_s) for v in victims)


def preemptible_cards(gpus: np.ndarray, hp_gpus: np.ndarray) -> np.ndarray:
    """Per node, the most whole cards evicting every spot pod can free: GPUs - ceil(HP GPUs),
    since HP's share of each card is at most 1 (an upper bound: Alg. 2 checks the cards)."""
    return np.asarray(gpus, dtype=float) - np.ceil(np.maximum(np.asarray(hp_gpus, dtype=float), 0.0) - EPS)


@dataclass
class Preemptor:
    """Algorithm 2: per node, virtually evict every spot task, then keep back (in ``keep`` order,
    highest first) each one whose GPUs the HP pod does not need; pick the node of least ``cost``
    (``node_choice='min_cost'``), the first feasible node (``'first'``) or a random one.
    ``max_candidates`` (None = every node, as Alg. 2 does) caps the nodes costed, by deficit.
    ``reach`` is the bound that skips a node before its victims are tried: ``'cards'`` (as the
    authors' release does) for a pod of whole GPUs the cards HP does not hold, GPUs - ceil(HP GPUs)
    (:func:`preemptible_cards`), for a fractional pod the freest card + the spot GPUs held there;
    ``'spot_share'`` idle cards (or the freest card) + the spot GPUs held there, which for a pod of
    whole GPUs misses every card a fractional spot pod shares with free space (two 0.81-GPU pods on
    two cards: 6 idle + 1.62 < 8 although evicting them frees 8 cards); ``'whole_node'`` the
    ``'cards'`` bound only on the nodes the pod fills whole, ``'spot_share'`` elsewhere."""

    keep: KeepOrder = keep_by_waste
    cost: NodeCost = gfs_node_cost
    node_choice: Literal["min_cost", "first", "random"] = "min_cost"
    random_victims: bool = False
    seed: int = 0
    max_candidates: int | None = None
    reach: Literal["cards", "spot_share", "whole_node"] = "cards"

    def victims_on(self, snap: ClusterSnapshot, work: WorkState, node: int, gpus: float,
                   rng: np.random.Generator | None) -> list[RunningTask] | None:
        tasks = [t for t in snap.spot_tasks_on(node) if t.id not in work.evicted]
        row = work.row(node).copy()
        if fits(row, gpus):
            return []
        if not tasks:
            return None
        share: dict[str, list[tuple[int, float]]] = {}
        for t in tasks:
            share[t.id] = [(c, s) for n, c, s in t.cards if n == node]
            for c, s in share[t.id]:
                row[c] += s
        if not fits(row, gpus):
            return None
        if rng is not None:
            order = [tasks[i] for i in rng.permutation(len(tasks))]
        else:
            order = sorted(tasks, key=lambda t: self.keep(t, snap.now_s), reverse=True)
        victims = []
        for t in order:  # Algorithm 2 lines 9-12: un-preempt while the pod still fits
            trial = row.copy()
            for c, s in share[t.id]:
                trial[c] -= s
            if fits(trial, gpus):
                row = trial
            else:
                victims.append(t)
        return victims

    def place_pod(self, snap: ClusterSnapshot, task: TaskRequest, work: WorkState, mask: BoolArray,
                  rng: np.random.Generator | None) -> tuple[int, list[RunningTask]] | None:
        g = task.gpus
        whole = g >= 1 - EPS
        need = float(round(g)) if whole else g
        reach = (work.idle if whole else work.max_free) + work.spot  # a cheap bound (see the class doc)
        if whole and self.reach == "cards":
            reach = preemptible_cards(snap.gpus, work.hp)
        elif whole and self.reach == "whole_node":
            reach = np.where(snap.gpus <= need, preemptible_cards(snap.gpus, work.hp), reach)
        cand = np.flatnonzero(mask & (reach >= need - EPS))
        if self.node_choice == "random" and rng is not None:
            cand = cand[rng.permutation(len(cand))]
        elif self.node_choice == "min_cost" and self.max_candidates and len(cand) > self.max_candidates:
            # optional scale cap (off by default: Alg. 2 lines 5-16 cost every node): only the nodes
            # that must free the fewest spot GPUs; it can miss the node of fewest victims (Eq. 19)
            free_now = work.idle[cand] if whole else work.max_free[cand]
            deficit = np.maximum(need - free_now, 0.0)
            cand = cand[np.lexsort((cand, deficit))[: self.max_candidates]]
        best: tuple[float, int, list[RunningTask]] | None = None
        vrng = rng if self.random_victims else None
        for n in cand:
            v = self.victims_on(snap, work, int(n), g, vrng)
            if v is None:
                continue
            if self.node_choice != "min_cost":
                return int(n), v
            c = self.cost(snap, v)
            if best is None or c < best[0] - 1e-15:
                best = (c, int(n), v)
                if not v:
                    break  # no victims: the least cost Eq. 19 can give
        return None if best is None else (best[1], best[2])


# ---------------------------------------------------------------------------------------------
# the framework (Algorithms 1 and 3)
# ---------------------------------------------------------------------------------------------
QueueOrder = Literal["size", "size_release", "size_desc", "fcfs"]


@dataclass(frozen=True)
class QueueRule:
    """How the simulator (or the control plane) orders and drains the pending queue.

    ``order='size'``: GFS, Sec. 3.4.2 "sorts tasks in the queue based on their GPU requests, pod
    requests, and submission times": HP first, then fewer GPUs per pod (g), fewer pods (w),
    earlier submission (the paper gives no direction; ascending, like its submission-time key);
    ``'size_release'``: the same keys in the directions of the authors' release (``spot.py``):
    HP by more GPUs per pod, then earlier submission; spot by more GPUs per pod, then fewer pods,
    then earlier submission (later tasks still backfill: the release skips only the tasks that
    ask for at least the GPUs per pod of one that failed);
    ``'size_desc'``: more GPUs first (first-fit decreasing);
    ``'fcfs'``: HP first, then submission time. ``strict``: the head of each priority class
    blocks the tasks behind it (YARN-CS FCFS); otherwise later tasks may backfill.
    """

    order: QueueOrder = "size"
    strict: bool = False


def queue_key(order: QueueOrder, is_hp: bool, gpus_per_pod: float, pods: int, submitted_s: float) -> tuple[float, ...]:
    """A pending task's rank within its priority class under ``order`` (:class:`QueueRule`; for
    ``'size'`` Sec. 3.4.2: GPUs per pod, then pods, then submission), smallest first."""
    if order == "size":
        return (gpus_per_pod, pods, submitted_s)
    if order == "size_release":
        return (-gpus_per_pod, submitted_s) if is_hp else (-gpus_per_pod, pods, submitted_s)
    if order == "size_desc":
        return (-gpus_per_pod * pods, -pods, -gpus_per_pod, submitted_s)
    return (submitted_s,)


@dataclass(frozen=True)
class QuotaRule:
    """Spot quota (Eq. 9-11) of GFS and its ablations: which forecaster, whether eta adapts."""

    forecaster: Literal["orglinear", "last_week_peak"] = "orglinear"
    adapt_eta: bool = True


@dataclass
class FrameworkScheduler:
    """Algorithm 3: quota check, non-preemptive placement (Alg. 1), then HP preemption (Alg. 2)."""

    name: str
    filters: tuple[FilterPlugin, ...]
    scores: tuple[ScorePlugin, ...]
    preemptor: Preemptor | None = None
    queue: QueueRule = field(default_factory=QueueRule)
    quota: QuotaRule | None = None
    preempt_every_s: float | None = None  # Chronus: preempt only at lease ends (multiples of it)
    lease_release_s: float | None = None  # Chronus as released: every task re-queued this often
    seed: int = 0
    hp_pack_first: bool = False  # small HP pods to the nodes HP holds first, evicting spot there
    _task_filters: tuple[FilterPlugin, ...] = field(init=False, repr=False, compare=False)
    _pod_filters: tuple[PodFilterPlugin, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._pod_filters = tuple(f for f in self.filters if isinstance(f, PodFilterPlugin))
        self._task_filters = tuple(f for f in self.filters if not isinstance(f, PodFilterPlugin))

    def quota_satisfied(self, snap: ClusterSnapshot, task: TaskRequest) -> bool:
        """Algorithm 3 line 1: a spot task must fit under Q_H; HP tasks always pass."""
        if task.is_hp or snap.spot_quota is None:
            return True
        return snap.spot_allocated + task.total_gpus <= snap.spot_quota + EPS

    def schedule(self, snap: ClusterSnapshot, task: TaskRequest) -> Placement | None:
        if not self.quota_satisfied(snap, task):
            return None
        if task.is_hp and self.hp_pack_first:
            placed = self._on_hp_nodes(snap, task)
            if placed is not None:
                return placed
        placed = self.non_preemptive(snap, task)
        if placed is None and task.is_hp and self.preemptor is not None and self._may_preempt(snap):
            placed = self.preemptive(snap, task)
        return placed

    def _on_hp_nodes(self, snap: ClusterSnapshot, task: TaskRequest) -> Placement | None:
        """``hp_pack_first``: an HP pod smaller than every eligible node goes to the nodes HP already
        holds, evicting spot there if it must, before it may land on a node free of HP."""
        held = np.asarray(snap.hp_gpus) > EPS
        if not held.any() or task.gpus >= float(np.min(snap.gpus)) - EPS:
            return None
        placed = self.non_preemptive(snap, task, within=held)
        if placed is None and self.preemptor is not None and self._may_preempt(snap):
            placed = self.preemptive(snap, task, within=held)
        return placed

    def _may_preempt(self, snap: ClusterSnapshot) -> bool:
        if self.preempt_every_s is None:
            return True
        r = snap.now_s % self.preempt_every_s
        return r < 1e-6 or self.preempt_every_s - r < 1e-6

    def _static_mask(self, snap: ClusterSnapshot, task: TaskRequest, work: WorkState) -> BoolArray:
        mask = np.ones(snap.n_nodes, dtype=bool)
        for f in self._task_filters:
            m = f.filter(snap, task, work)
            if m is not None:
                mask &= m
        if not task.is_hp and snap.spot_nodes is not None:
            mask &= snap.spot_nodes
        if snap.reserved_nodes is not None and task.id != snap.reserved_for:
            mask &= ~snap.reserved_nodes
        return mask

    def non_preemptive(self, snap: ClusterSnapshot, task: TaskRequest,
                       within: BoolArray | None = None) -> Placement | None:
        """Algorithm 1 as a gang transaction: all pods fit (best node each time) or None;
        ``within`` (None = all) limits the nodes."""
        work = WorkState(snap)
        static = self._static_mask(snap, task, work)
        if within is not None:
            static = static & within
        if not GangPreFilter().feasible(task, work, static & self._pod_mask(task, work)):
            return None
        pods = []
        for _ in range(task.pods):
            cand = np.flatnonzero(static & self._pod_mask(task, work))
            if len(cand) == 0:
                return None
            n = best_node(cand, [s.score(snap, task, work) for s in self.scores])
            pods.append(PodPlacement(n, str(snap.node_names[n]), work.take(n, task.gpus, task.is_hp)))
        return Placement(task.id, tuple(pods))

    def _pod_mask(self, task: TaskRequest, work: WorkState) -> BoolArray:
        """The nodes every per-pod filter (capacity) allows for the gang's next pod."""
        filters = self._pod_filters
        if len(filters) == 1:
            return filters[0].pod_filter(task, work)
        mask = np.ones(work.idle.shape[0], dtype=bool)
        for f in filters:
            mask &= f.pod_filter(task, work)
        return mask

    def preemptive(self, snap: ClusterSnapshot, task: TaskRequest,
                   within: BoolArray | None = None) -> Placement | None:
        """Algorithm 2 for an HP task (gang transaction as well); spot tasks never get here;
        ``within`` (None = all) limits the nodes."""
        assert self.preemptor is not None
        work = WorkState(snap)
        static = self._static_mask(snap, task, work)
        if within is not None:
            static = static & within
        rng = np.random.default_rng([self.seed, _stable_hash(task.id)])
        pods, victims = [], []
        for _ in range(task.pods):
            got = self.preemptor.place_pod(snap, task, work, static, rng)
            if got is None:
                return None
            n, vs = got
            for v in vs:
                work.evict(v)
                victims.append(v.id)
            pods.append(PodPlacement(n, str(snap.node_names[n]), work.take(n, task.gpus, task.is_hp)))
        return Placement(task.id, tuple(pods), tuple(victims))
