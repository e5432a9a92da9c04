"""GFS's named options (docs/gfs.md) as one value, and the presets the live plane picks from.

Every place that runs GFS takes its options from here: the simulator's :class:`SimConfig`
defaults (``policies.sim.gpu_sim``), the quota allocator's :class:`QuotaParams` default aggregation
(``policies.quota``, used by ``actors.quota``), the scheduler's queue order
(``policies.schedulers.make_scheduler``, used by ``controlplane.reconcile``).
:data:`LIVE_DEFAULT` is the preset the robustness run (``python -m benchmarks.scheduler robust``)
picked by its worst case over the held-in traces; ``as_released`` is the set the reproduction
tables of docs/gfs.md ran with.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType

#: Each option's allowed values (the first is the one the reproduction tables ran with).
CHOICES: MappingProxyType[str, tuple[str, ...]] = MappingProxyType({
    "hp_demand": ("running", "held_queued"),  # HP demand sampled: GPUs of running HP / + queued HP
    "hourly": ("max", "mean"),  # one hourly history point: max or mean of the per-tick samples
    "aggregation": ("summed_gaussian", "sum_of_quantiles"),
    "eta_rate": ("paper", "release"),  # Eq. 11's e: evictions / starts over H / F / (F + S) over eta_window_h
    "pools": ("per_model", "cluster"),  # one quota per GPU model, or one for the whole cluster
    "queue": ("size", "size_release", "fcfs"),
    "hp_react": ("off", "queued"),  # queued HP GPUs cap the pool's quota at once (a design variant)
    "eta_max": ("4", "1"),
    "spot_score": ("packing", "fragmentation", "hp_nodes_first"),
    "hp_score": ("packing", "hp_colocate"),
    # the quota admits the oldest spot task once it waited theta (_4h: 4 theta; oldest_calm*: only while
    # the pool's eviction rate is below Eq. 11's growth threshold 0.5 (1 - p), calm3: below 3%;
    # _<n>h: after n theta; _<n>ph: once per H / n at most; _hpq: not while HP for the pool queues;
    # _bk: the pool's wait doubles after a task the guard admitted is evicted, halves after one holds H;
    # _bkall: every spot task started while the guard's raise stands counts as admitted)
    "spot_guard": ("off", "oldest", "oldest_calm", "oldest_calm_4h", "oldest_calm_4h_1ph",
                   "oldest_calm3_4h_1ph",
                   "oldest_calm_4h_2ph", "oldest_calm_4h_3ph", "oldest_calm_2h_2ph", "oldest_calm_2h_1ph",
                   "oldest_calm_3h_2ph", "oldest_calm_2h_2ph_hpq", "oldest_calm_4h_2ph_hpq",
                   "oldest_calm_2h_2ph_bk", "oldest_calm_4h_2ph_bk",
                   "oldest_calm_2h_3ph", "oldest_calm_3h_1ph", "oldest_calm_1h_2ph", "oldest_calm_5h_2ph",
                   "oldest_calm_2h_2ph_bkall", "oldest_calm_4h_2ph_bkall", "oldest_calm_3h_2ph_bkall",
                   "oldest_calm_5h_2ph_bkall", "oldest_calm_4h_1ph_bkall", "oldest_calm_4h_3ph_bkall",
                   "oldest_calm_1h_1ph", "oldest_calm_4h_bkall", "oldest_calm_3h_3ph_bkall", "oldest_calm_5h_3ph_bkall"),
    # head: the oldest HP task of whole GPUs that waited a tick holds the nodes of least HP for its pods;
    # drain: the oldest HP task of whole-node pods that waited a tick drains the nodes of least HP
    # (nothing lands there, their spot pods are evicted at once; drain_keep: they run on) until it
    # starts or DRAIN_BOUND_S passes
    "hp_reserve": ("off", "head", "drain", "drain_keep"),
    "preempt_reach": ("cards", "spot_share", "whole_node"),
    "hp_pack": ("off", "hp_nodes"),
})


@dataclass(frozen=True)
class GfsOptions:
    """One choice per option of :data:`CHOICES` (docs/gfs.md, "named options")."""

    hp_demand: str = "running"
    hourly: str = "max"
    aggregation: str = "summed_gaussian"
    eta_rate: str = "paper"
    pools: str = "per_model"
    queue: str = "size"
    hp_react: str = "off"
    eta_max: str = "4"
    spot_score: str = "packing"
    hp_score: str = "packing"
    spot_guard: str = "off"
    hp_reserve: str = "off"
    preempt_reach: str = "cards"
    hp_pack: str = "off"

    def __post_init__(self) -> None:
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"GFS option {name}={getattr(self, name)!r}: use one of {', '.join(allowed)}")


AS_RELEASED = GfsOptions()
#: The GFS variants the robustness run compares (each an ablation row of docs/gfs.md).
GFS_VARIANTS: MappingProxyType[str, GfsOptions] = MappingProxyType({
    "as_released": AS_RELEASED,
    "hp_held_queued": replace(AS_RELEASED, hp_demand="held_queued"),
    "hourly_mean": replace(AS_RELEASED, hourly="mean"),
    "sum_of_quantiles": replace(AS_RELEASED, aggregation="sum_of_quantiles"),
    "eta_release": replace(AS_RELEASED, eta_rate="release"),
    "one_pool": replace(AS_RELEASED, pools="cluster"),
    "queue_release": replace(AS_RELEASED, queue="size_release"),
    "queue_fcfs": replace(AS_RELEASED, queue="fcfs"),
    "hp_react": replace(AS_RELEASED, hp_react="queued"),
    "fcfs_hp_react": replace(AS_RELEASED, queue="fcfs", hp_react="queued"),
    "fcfs_sum_of_quantiles": replace(AS_RELEASED, queue="fcfs", aggregation="sum_of_quantiles"),
    "fcfs_eta_max_1": replace(AS_RELEASED, queue="fcfs", eta_max="1"),
    "fcfs_eta_max_1_spot_fgd": replace(AS_RELEASED, queue="fcfs", eta_max="1", spot_score="fragmentation"),
    "fcfs_eta_max_1_hp_colocate": replace(AS_RELEASED, queue="fcfs", eta_max="1", hp_score="hp_colocate"),
    "fcfs_eta_max_1_spot_guard": replace(AS_RELEASED, queue="fcfs", eta_max="1", spot_guard="oldest"),
    "fcfs_eta_max_1_colocate_guard": replace(AS_RELEASED, queue="fcfs", eta_max="1", hp_score="hp_colocate",
                                             spot_guard="oldest"),
    "fcfs_colocate_guard": replace(AS_RELEASED, queue="fcfs", hp_score="hp_colocate", spot_guard="oldest"),
    "fcfs_eta_max_1_calm_guard": replace(AS_RELEASED, queue="fcfs", eta_max="1", spot_guard="oldest_calm"),
    "fcfs_calm_guard": replace(AS_RELEASED, queue="fcfs", spot_guard="oldest_calm"),
    "fcfs_eta_max_1_colocate_calm_guard": replace(AS_RELEASED, queue="fcfs", eta_max="1", hp_score="hp_colocate",
                                                  spot_guard="oldest_calm"),
    "fcfs_eta_max_1_calm_guard_4h": replace(AS_RELEASED, queue="fcfs", eta_max="1", spot_guard="oldest_calm_4h"),
    "fcfs_eta_max_1_calm_guard_4h_1ph": replace(AS_RELEASED, queue="fcfs", eta_max="1",
                                                spot_guard="oldest_calm_4h_1ph"),
    "fcfs_eta_max_1_hp_reserve": replace(AS_RELEASED, queue="fcfs", eta_max="1", hp_reserve="head"),
    "fcfs_eta_max_1_reserve_calm_guard": replace(AS_RELEASED, queue="fcfs", eta_max="1", hp_reserve="head",
                                                 spot_guard="oldest_calm"),
    "fcfs_4h_1ph_drain": replace(AS_RELEASED, queue="fcfs", eta_max="1", spot_guard="oldest_calm_4h_1ph",
                                 hp_reserve="drain"),
    "fcfs_4h_1ph_drain_keep": replace(AS_RELEASED, queue="fcfs", eta_max="1", spot_guard="oldest_calm_4h_1ph",
                                      hp_reserve="drain_keep"),
    "fcfs_4h_1ph_spot_hp_nodes": replace(AS_RELEASED, queue="fcfs", eta_max="1", spot_guard="oldest_calm_4h_1ph",
                                         spot_score="hp_nodes_first"),
    "fcfs_eta_max_1_calm3_guard_4h_1ph": replace(AS_RELEASED, queue="fcfs", eta_max="1", spot_guard="oldest_calm3_4h_1ph"),
    "fcfs_eta_max_1_calm_guard_4h_2ph": replace(AS_RELEASED, queue="fcfs", eta_max="1", spot_guard="oldest_calm_4h_2ph"),
    "fcfs_eta_max_1_calm_guard_4h_3ph": replace(AS_RELEASED, queue="fcfs", eta_max="1", spot_guard="oldest_calm_4h_3ph"),
    "fcfs_eta_max_1_calm_guard_2h_2ph": replace(AS_RELEASED, queue="fcfs", eta_max="1", spot_guard="oldest_calm_2h_2ph"),
    "fcfs_eta_max_1_calm_guard_2h_1ph": replace(AS_RELEASED, queue="fcfs", eta_max="1", spot_guard="oldest_calm_2h_1ph"),
    "fcfs_eta_max_1_calm_guard_3h_2ph": replace(AS_RELEASED, queue="fcfs", eta_max="1", spot_guard="oldest_calm_3h_2ph"),
    "fcfs_eta_max_1_calm_guard_2h_2ph_hpq": replace(AS_RELEASED, queue="fcfs", eta_max="1",
                                                    spot_guard="oldest_calm_2h_2ph_hpq"),
    "fcfs_eta_max_1_calm_guard_4h_2ph_hpq": replace(AS_RELEASED, queue="fcfs", eta_max="1",
                                                    spot_guard="oldest_calm_4h_2ph_hpq"),
    "fcfs_eta_max_1_colocate_calm_guard_4h_2ph": replace(AS_RELEASED, queue="fcfs", eta_max="1", hp_score="hp_colocate",
                                                         spot_guard="oldest_calm_4h_2ph"),
    "fcfs_eta_max_1_calm_guard_2h_2ph_bk": replace(AS_RELEASED, queue="fcfs", eta_max="1",
                                                   spot_guard="oldest_calm_2h_2ph_bk"),
    "fcfs_eta_max_1_calm_guard_4h_2ph_bk": replace(AS_RELEASED, queue="fcfs", eta_max="1",
                                                   spot_guard="oldest_calm_4h_2ph_bk"),
    "fcfs_eta_max_1_calm_guard_2h_2ph_bkall": replace(AS_RELEASED, queue="fcfs", eta_max="1",
                                                      spot_guard="oldest_calm_2h_2ph_bkall"),
    "fcfs_eta_max_1_calm_guard_4h_2ph_bkall": replace(AS_RELEASED, queue="fcfs", eta_max="1",
                                                      spot_guard="oldest_calm_4h_2ph_bkall"),
    # the guard grid around the third round's 4-miss guards (docs/gfs.md, "Fourth round")
    **{f"fcfs_eta_max_1_calm_guard_{g}": replace(AS_RELEASED, queue="fcfs", eta_max="1", spot_guard=f"oldest_calm_{g}")
       for g in ("2h_3ph", "3h_1ph", "1h_2ph", "5h_2ph", "3h_2ph_bkall", "5h_2ph_bkall", "4h_1ph_bkall",
                 "4h_3ph_bkall", "1h_1ph",
                 # the unrun grid neighbours of the `misses` rule's pick 4h_3ph_bkall (fifth round)
                 "4h_bkall", "3h_3ph_bkall", "5h_3ph_bkall")},
    # Alg. 2 tries only the nodes with idle + spot GPUs enough, this simulator's bound before it
    # followed the release (docs/gfs.md, "Fifth round"): the live guard and its grid neighbours
    **{f"fcfs_eta_max_1_calm_guard_{g}_share": replace(AS_RELEASED, queue="fcfs", eta_max="1",
                                                       spot_guard=f"oldest_calm_{g}", preempt_reach="spot_share")
       for g in ("2h_1ph", "1h_1ph", "3h_1ph", "2h_2ph")},
    # the same bound only for HP pods that fill a node
    **{f"fcfs_eta_max_1_calm_guard_{g}_node": replace(AS_RELEASED, queue="fcfs", eta_max="1",
                                                      spot_guard=f"oldest_calm_{g}", preempt_reach="whole_node")
       for g in ("2h_1ph", "1h_1ph", "3h_1ph", "2h_2ph")},
    # ... with spot placed beside HP first (fewer spot pods on the nodes a whole-node HP pod takes)
    "fcfs_eta_max_1_calm_guard_2h_1ph_node_spot_hp": replace(AS_RELEASED, queue="fcfs", eta_max="1",
                                                             spot_guard="oldest_calm_2h_1ph", preempt_reach="whole_node",
                                                             spot_score="hp_nodes_first"),
    "fcfs_eta_max_1_calm_guard_2h_1ph_spot_hp": replace(AS_RELEASED, queue="fcfs", eta_max="1",
                                                        spot_guard="oldest_calm_2h_1ph", spot_score="hp_nodes_first"),
    # ... with the nodes of least HP held for the oldest whole-node HP task (hp_reserve, drain_keep)
    **{f"fcfs_eta_max_1_calm_guard_{g}_keep": replace(AS_RELEASED, queue="fcfs", eta_max="1",
                                                      spot_guard=f"oldest_calm_{g}", hp_reserve="drain_keep")
       for g in ("2h_1ph", "1h_1ph", "3h_1ph", "2h_2ph")},
    # ... with HP pods smaller than a node sent to the nodes HP holds first, evicting spot there
    **{f"fcfs_eta_max_1_calm_guard_2h_1ph{r}_pack": replace(AS_RELEASED, queue="fcfs", eta_max="1",
                                                            spot_guard="oldest_calm_2h_1ph", preempt_reach=reach,
                                                            hp_pack="hp_nodes")
       for r, reach in (("", "cards"), ("_node", "whole_node"))},
    # ... with small HP pods gathered on nodes HP already uses
    "fcfs_eta_max_1_calm_guard_2h_1ph_node_colocate": replace(AS_RELEASED, queue="fcfs", eta_max="1",
                                                              spot_guard="oldest_calm_2h_1ph", preempt_reach="whole_node",
                                                              hp_score="hp_colocate"),
    # GFS's own queue order (size) with the eta cap and the calm guard, at both reaches (sixth round)
    **{f"eta_max_1_calm_guard_{g}{r}": replace(AS_RELEASED, eta_max="1", spot_guard=f"oldest_calm_{g}", preempt_reach=reach)
       for g in ("2h_1ph", "1h_1ph", "3h_1ph", "2h_2ph") for r, reach in (("", "cards"), ("_share", "spot_share"))},
})
#: The preset the live plane runs: the one the robustness run picked over the six openb lists and
#: gfs-a100 at three loads by the most traces it or a guard-grid neighbour misses (docs/gfs.md,
#: "Robustness run", sixth round): with the release's reach for every scheduler, the release's
#: own options miss no more traces than any variant, and no guard-grid point holds on its grid.
LIVE_DEFAULT_NAME = "as_released"
LIVE_DEFAULT: GfsOptions = GFS_VARIANTS[LIVE_DEFAULT_NAME]
