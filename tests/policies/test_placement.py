"""GFS scheduling framework: each equation on hand-computed cases, each plugin alone, gang
all-or-nothing, the circuit breaker, preemption (Algorithm 2) and the quota check (Algorithm 3)."""

from __future__ import annotations

import math
from types import MappingProxyType

import numpy as np
import pytest

from controlplane.core.errors import InvalidInput
from policies.placement import (
    CapacityFilter,
    CircuitBreakerFilter,
    ClusterSnapshot,
    CoLocationScore,
    EvictionScore,
    FragmentationScore,
    GpuModelFilter,
    PackingScore,
    QuotaRule,
    RunningTask,
    TaskRequest,
    WorkState,
    eviction_score,
    gfs_node_cost,
    pick_cards,
    weighted_evictions,
)
from policies.placement import _stable_hash as stable_hash
from policies.schedulers import SCHEDULERS, make_scheduler


def snapshot(gpus: list[int], running: list[RunningTask] = (), now: float = 0.0, models: list[str] | None = None,
             ev_short: list[float] | None = None, ev_long: list[float] | None = None, g: int = 0, f: int = 0,
             quota: float | None = None) -> ClusterSnapshot:
    """A cluster with ``running`` tasks already holding their cards."""
    n = len(gpus)
    base = ClusterSnapshot.empty([f"n{i}" for i in range(n)], models or ["A100"] * n, gpus)
    card_free = np.array(base.card_free)
    hp, spot = np.zeros(n), np.zeros(n)
    node_tasks: dict[int, dict[str, None]] = {i: {} for i in range(n)}
    for t in running:
        for node, c, s in t.cards:
            card_free[node, c] -= s
            (hp if t.priority == "hp" else spot)[node] += s
            node_tasks[node][t.id] = None
    spot_alloc = sum(t.total_gpus for t in running if t.priority == "spot")
    return ClusterSnapshot(now, base.node_names, base.gpu_model, base.gpus, card_free, hp, spot,
                           np.array(ev_short or [0.0] * n), np.array(ev_long or [0.0] * n),
                           MappingProxyType({t.id: t for t in running}), MappingProxyType(node_tasks), g, f, quota,
                           spot_alloc)


def rt(tid: str, prio: str, node: int, cards: list[int], started: float = 0.0, share: float = 1.0) -> RunningTask:
    return RunningTask(tid, prio, float(len(cards)) * share, 1, tuple((node, c, share) for c in cards), started)  # type: ignore[arg-type]


# ---- equations -------------------------------------------------------------------------------
def test_eq13_packing_prefers_the_fullest_node() -> None:
    s = snapshot([8, 8, 4], [rt("a", "hp", 0, [0, 1, 2, 3, 4, 5]), rt("b", "hp", 2, [0])])
    sc = PackingScore().score(s, TaskRequest("t", "hp", 1), WorkState(s))
    assert sc == pytest.approx([1 - 2 / 8, 0.0, 1 - 3 / 4])


def test_eq13_packing_counts_idle_cards_for_whole_pods_and_available_gpus_for_fractions() -> None:
    # n0: one card half used (7 idle cards, 7.5 GPUs available); n1: one card fully used (7 idle)
    s = snapshot([8, 8], [rt("a", "hp", 0, [0], share=0.5), rt("b", "hp", 1, [0])])
    w = WorkState(s)
    assert PackingScore().score(s, TaskRequest("t", "hp", 1), w) == pytest.approx([1 / 8, 1 / 8])
    assert PackingScore().score(s, TaskRequest("t", "hp", 0.5), w) == pytest.approx([0.5 / 8, 1 / 8])


def test_eq14_co_location_by_priority() -> None:
    s = snapshot([8, 8], [rt("a", "hp", 0, [0, 1]), rt("b", "spot", 1, [0, 1, 2, 3])])
    w = WorkState(s)
    assert CoLocationScore().score(s, TaskRequest("h", "hp", 1), w) == pytest.approx([0.25, 0.0])
    assert CoLocationScore().score(s, TaskRequest("s", "spot", 1), w) == pytest.approx([0.0, 0.5])


def test_eq15_16_weighted_evictions_and_asymmetric_score() -> None:
    e = weighted_evictions(2.0, 24.0, gamma=0.8)  # 0.8 * 2 + 0.2 * 24 / 24
    assert float(e) == pytest.approx(1.8)
    assert float(eviction_score(e, hp=True, m=3)) == pytest.approx(0.01 * 3 ** 1.8)
    assert float(eviction_score(e, hp=False, m=3)) == pytest.approx(1 - 0.01 * 3 ** 1.8)
    big = math.log(100) / math.log(3) + 0.01
    assert float(eviction_score(big, hp=True)) == 1.0 and float(eviction_score(big, hp=False)) == 0.0


def test_eq17_waste_since_last_checkpoint() -> None:
    t = RunningTask("s", "spot", 2.0, 2, ((0, 0, 1.0), (0, 1, 1.0), (1, 0, 1.0), (1, 1, 1.0)), 100.0, 3600.0)
    assert t.last_checkpoint_s(100.0 + 5000.0) == pytest.approx(3700.0)
    assert t.waste(5100.0) == pytest.approx(4 * 1400.0)
    assert RunningTask("x", "spot", 1.0, 1, ((0, 0, 1.0),), 0.0, math.inf).waste(50.0) == pytest.approx(50.0)


def test_eq19_node_cost() -> None:
    s = snapshot([8, 8], now=5000.0, g=8, f=2)
    v = RunningTask("v", "spot", 1.0, 1, ((0, 0, 1.0),), 0.0, 3600.0)  # waste 1400 GPU-s
    expect = (2 + 1) / (8 + 2 + 1) + 0.5 * 1400.0 / (16 * 3600.0)
    assert gfs_node_cost(s, [v], usage_window_s=3600.0) == pytest.approx(expect)
    assert gfs_node_cost(s, [v]) == pytest.approx(3 / 11 + 0.5 * 1400.0 / (16 * 7 * 86400.0))
    assert gfs_node_cost(s, []) == pytest.approx(2 / 10)


def test_eq19_node_cost_of_a_first_eviction() -> None:
    """No spot run has ended yet (G = F = 0): evicting one task is an eviction rate of 1 / 1."""
    s = snapshot([8, 8], now=5000.0, g=0, f=0)
    v = RunningTask("v", "spot", 1.0, 1, ((0, 0, 1.0),), 0.0, 3600.0)  # waste 1400 GPU-s
    assert gfs_node_cost(s, [v], usage_window_s=3600.0) == pytest.approx(
        1.0 + 0.5 * 1400.0 / (16 * 3600.0), rel=1e-12)
    assert gfs_node_cost(s, []) == 0.0


# ---- each plugin alone -----------------------------------------------------------------------
def test_capacity_filter_whole_and_fractional() -> None:
    s = snapshot([8, 4], [rt("a", "hp", 0, [0, 1, 2, 3, 4]), rt("b", "spot", 1, [0, 1, 2, 3], share=0.75)])
    w = WorkState(s)
    assert list(CapacityFilter().filter(s, TaskRequest("t", "hp", 3), w)) == [True, False]
    assert list(CapacityFilter().filter(s, TaskRequest("t", "hp", 4), w)) == [False, False]
    assert list(CapacityFilter().filter(s, TaskRequest("t", "spot", 0.25), w)) == [True, True]
    assert list(CapacityFilter().filter(s, TaskRequest("t", "spot", 0.5), w)) == [True, False]


def test_gpu_model_filter() -> None:
    s = snapshot([8, 8, 1], models=["A100", "H800", "A10"])
    w = WorkState(s)
    assert GpuModelFilter().filter(s, TaskRequest("t", "hp", 1), w) is None
    assert list(GpuModelFilter().filter(s, TaskRequest("t", "hp", 1, gpu_model="H800|A10"), w)) == [False, True, True]


def test_circuit_breaker_blacklists_only_for_spot() -> None:
    s = snapshot([8, 8], ev_short=[6.0, 0.0], ev_long=[6.0, 0.0])
    w = WorkState(s)
    assert list(CircuitBreakerFilter().filter(s, TaskRequest("s", "spot", 1), w)) == [False, True]
    assert CircuitBreakerFilter().filter(s, TaskRequest("h", "hp", 1), w) is None
    gfs = make_scheduler("gfs")
    assert gfs.schedule(s, TaskRequest("s", "spot", 8)).nodes == ("n1",)
    assert gfs.schedule(s, TaskRequest("h", "hp", 8)).nodes == ("n0",)  # HP seeks the evicted node
    s2 = snapshot([8], ev_short=[6.0], ev_long=[6.0])
    assert gfs.schedule(s2, TaskRequest("s", "spot", 1)) is None
    # Alg. 1 line 7: fractional pods are filtered on available GPUs only, no breaker
    assert CircuitBreakerFilter().filter(s, TaskRequest("f", "spot", 0.5), w) is None
    assert gfs.schedule(s2, TaskRequest("f", "spot", 0.5)) is not None


def test_eviction_score_breaks_ties_only() -> None:
    s = snapshot([8, 8], ev_short=[1.0, 0.0], ev_long=[0.0, 0.0])
    w = WorkState(s)
    sp = EvictionScore().score(s, TaskRequest("s", "spot", 1), w)
    assert sp[1] > sp[0]
    assert make_scheduler("gfs").schedule(s, TaskRequest("s", "spot", 1)).nodes == ("n1",)
    assert make_scheduler("gfs").schedule(s, TaskRequest("h", "hp", 1)).nodes == ("n0",)


def test_scores_in_the_paper_order_packing_first() -> None:
    # n0 has more HP (criterion 2) but n1 is fuller (criterion 1): packing wins
    s = snapshot([8, 8], [rt("a", "hp", 0, [0, 1]), rt("b", "spot", 1, [0, 1, 2, 3])])
    assert make_scheduler("gfs").schedule(s, TaskRequest("h", "hp", 1)).nodes == ("n1",)
    # equal packing: co-location decides
    s = snapshot([8, 8], [rt("a", "hp", 0, [0, 1]), rt("b", "spot", 1, [0, 1])])
    assert make_scheduler("gfs").schedule(s, TaskRequest("h", "hp", 1)).nodes == ("n0",)
    assert make_scheduler("gfs").schedule(s, TaskRequest("s", "spot", 1)).nodes == ("n1",)


def test_fragmentation_score_keeps_whole_nodes() -> None:
    s = snapshot([8, 8], [rt("a", "hp", 1, [0, 1, 2, 3, 4, 5, 6])])  # n1 has 1 idle card
    sc = FragmentationScore().score(s, TaskRequest("t", "spot", 1), WorkState(s))
    assert sc[1] > sc[0]  # using the leftover card adds no fragmentation; breaking n0 does


def test_fractional_pods_share_a_card() -> None:
    assert pick_cards(np.array([1.0, 0.5, 0.25]), 0.5) == ((1, 0.5),)
    assert pick_cards(np.array([1.0, 1.0, 0.0]), 2.0) == ((0, 1.0), (1, 1.0))
    assert pick_cards(np.array([1.0, 0.0]), 2.0) is None
    s = snapshot([1], [rt("a", "spot", 0, [0], share=0.5)])
    p = make_scheduler("gfs").schedule(s, TaskRequest("b", "hp", 0.5))
    assert p is not None and p.pods[0].cards == ((0, 0.5),) and not p.victims


# ---- gang, preemption, quota -----------------------------------------------------------------
def test_gang_all_or_nothing() -> None:
    s = snapshot([8, 8])
    gfs = make_scheduler("gfs")
    assert gfs.schedule(s, TaskRequest("g", "hp", 8, pods=3)) is None
    assert np.all(s.card_free == 1.0)  # nothing was taken from the snapshot
    p = gfs.schedule(snapshot([8, 8, 8]), TaskRequest("g", "hp", 8, pods=3))
    assert p is not None and sorted(p.nodes) == ["n0", "n1", "n2"]
    p = gfs.schedule(snapshot([8]), TaskRequest("g", "spot", 2, pods=4))
    assert p is not None and p.nodes == ("n0",) * 4
    cards = [c for pod in p.pods for c, _ in pod.cards]
    assert sorted(cards) == list(range(8))  # no card handed out twice inside the gang


def test_spot_never_preempts() -> None:
    s = snapshot([8], [rt("v", "spot", 0, list(range(8)))])
    for name in SCHEDULERS:
        assert make_scheduler(name).schedule(s, TaskRequest("s", "spot", 1)) is None


def test_algorithm2_evicts_the_cheapest_victims_on_the_cheapest_node() -> None:
    now = 3000.0
    running = [rt("a1", "spot", 0, [0, 1, 2, 3], started=0.0),     # waste 4*3000
               rt("a2", "spot", 0, [4, 5, 6, 7], started=2900.0),  # waste 4*100
               rt("b1", "spot", 1, [0, 1, 2, 3, 4, 5, 6, 7], started=2950.0),  # waste 8*50
               rt("h", "hp", 2, list(range(8)))]
    s = snapshot([8, 8, 8], running, now=now, g=10, f=0)
    p = make_scheduler("gfs").schedule(s, TaskRequest("x", "hp", 4))
    # n0 keeps a1 (high waste) and evicts a2 (1 victim, waste 400); n1 needs b1 (waste 400) too,
    # equal cost -> the first; both have one victim, Eq. 19 ties, lowest index wins
    assert p is not None and p.victims == ("a2",) and p.nodes == ("n0",)
    p = make_scheduler("gfs").schedule(s, TaskRequest("x", "hp", 8))
    assert p is not None and p.victims == ("b1",)  # one victim (n1) beats two (n0)


def test_preempt_reach_cards_tries_a_node_whose_spot_pods_share_cards_with_free_space() -> None:
    # n0: 6 idle cards and two 0.81-GPU spot pods on cards 0 and 1; n1: HP on every card. Evicting
    # both spot pods frees 8 cards, but idle + spot GPUs = 7.62 < 8 made Alg. 2 skip n0.
    s = snapshot([8, 8], [rt("a", "spot", 0, [0], share=0.81), rt("b", "spot", 0, [1], share=0.81),
                          rt("h", "hp", 1, list(range(8)))], now=600.0)
    assert make_scheduler("gfs", preempt_reach="spot_share").schedule(s, TaskRequest("x", "hp", 8)) is None
    for sched in (make_scheduler("gfs"), make_scheduler("gfs", preempt_reach="whole_node"), make_scheduler("chronus")):
        p = sched.schedule(s, TaskRequest("x", "hp", 8))
        assert p is not None and p.nodes == ("n0",) and set(p.victims) == {"a", "b"}
    # a 1-GPU HP pod beside a 0.81-GPU spot pod on a full node: only 'cards' reaches it
    full = snapshot([2], [rt("a", "spot", 0, [0], share=0.81), rt("h", "hp", 0, [1])], now=600.0)
    assert make_scheduler("gfs", preempt_reach="whole_node").schedule(full, TaskRequest("x", "hp", 1)) is None
    p = make_scheduler("gfs", preempt_reach="cards").schedule(full, TaskRequest("x", "hp", 1))
    assert p is not None and p.victims == ("a",)
    # a node HP holds a share of every card of stays out of reach; the bound is every scheduler's
    shared = snapshot([8], [rt("a", "spot", 0, list(range(8)), share=0.5), rt("h", "hp", 0, [0], share=0.3)])
    assert make_scheduler("gfs", preempt_reach="cards").schedule(shared, TaskRequest("x", "hp", 8)) is None
    assert make_scheduler("chronus").preemptor.reach == "cards"  # type: ignore[union-attr]
    assert make_scheduler("fgd", quota=True, preempt_reach="spot_share").preemptor.reach == "spot_share"  # type: ignore[union-attr]
    with pytest.raises(InvalidInput, match="preempt_reach"):
        make_scheduler("gfs", preempt_reach="all")


def test_hp_pack_sends_a_small_hp_pod_to_the_nodes_hp_holds_evicting_spot_there() -> None:
    # n0: HP on card 0, spot on cards 1-7; n1: idle. Packing puts a 1-GPU HP pod on idle n1 and
    # leaves no node free of HP; hp_nodes evicts one spot pod on n0 instead. A pod of a whole node
    # is not packed, and without a node holding HP nothing changes.
    s = snapshot([8, 8], [rt("h", "hp", 0, [0]), *[rt(f"s{c}", "spot", 0, [c], started=c) for c in range(1, 8)]])
    assert make_scheduler("gfs").schedule(s, TaskRequest("x", "hp", 1)).nodes == ("n1",)
    p = make_scheduler("gfs", hp_pack="hp_nodes").schedule(s, TaskRequest("x", "hp", 1))
    assert p is not None and p.nodes == ("n0",) and len(p.victims) == 1
    assert make_scheduler("gfs", hp_pack="hp_nodes").schedule(s, TaskRequest("x", "hp", 8)).nodes == ("n1",)
    empty = snapshot([8, 8])
    assert make_scheduler("gfs", hp_pack="hp_nodes").schedule(empty, TaskRequest("x", "hp", 1)).victims == ()
    with pytest.raises(InvalidInput, match="hp_pack"):
        make_scheduler("gfs", hp_pack="all")


def test_yarn_evicts_newest_on_first_node_and_lyra_minimises_lost_work() -> None:
    running = [rt("old", "spot", 0, [0, 1, 2, 3], started=0.0), rt("new", "spot", 0, [4, 5, 6, 7], started=500.0),
               rt("c", "spot", 1, [0, 1, 2, 3], started=900.0), rt("h", "hp", 1, [4, 5, 6, 7])]
    s = snapshot([8, 8], running, now=1000.0)
    assert make_scheduler("yarn_cs").schedule(s, TaskRequest("x", "hp", 4)).victims == ("new",)
    assert make_scheduler("lyra").schedule(s, TaskRequest("x", "hp", 4)).victims == ("c",)  # 400 GPU-s lost


def test_chronus_preempts_only_at_lease_ends() -> None:
    running = [rt("v", "spot", 0, list(range(8)))]
    ch = make_scheduler("chronus")
    assert ch.schedule(snapshot([8], running, now=450.0), TaskRequest("x", "hp", 8)) is None
    p = ch.schedule(snapshot([8], running, now=600.0), TaskRequest("x", "hp", 8))
    assert p is not None and p.victims == ("v",)


def test_quota_check_algorithm3() -> None:
    gfs = make_scheduler("gfs")
    s = snapshot([8, 8], [rt("a", "spot", 0, [0, 1, 2])], quota=4.0)
    assert gfs.schedule(s, TaskRequest("s", "spot", 1)) is not None  # 3 + 1 <= 4
    assert gfs.schedule(s, TaskRequest("s", "spot", 2)) is None  # 3 + 2 > 4
    assert gfs.schedule(s, TaskRequest("h", "hp", 8)) is not None  # HP ignores the spot quota


def test_snapshot_is_immutable_and_validates() -> None:
    s = snapshot([8])
    with pytest.raises(ValueError):
        s.card_free[0, 0] = 0.0
    with pytest.raises(InvalidInput, match="hp_gpus"):
        ClusterSnapshot(0.0, np.array(["a"]), np.array(["A"]), np.array([8]), np.ones((1, 8)), np.zeros(2),
                        np.zeros(1), np.zeros(1), np.zeros(1))


def test_bad_requests_and_names() -> None:
    with pytest.raises(InvalidInput, match="gpus"):
        TaskRequest("t", "hp", 1.5)
    with pytest.raises(InvalidInput, match="gpus"):
        TaskRequest("t", "hp", 0)
    with pytest.raises(InvalidInput, match="priority"):
        TaskRequest("t", "low", 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="scheduler"):
        make_scheduler("kube")


def test_alg2_costs_every_node_not_only_the_smallest_deficits() -> None:
    # 70 nodes with seven 1-GPU spot tasks (deficit 7, 7 victims) and one node with a single
    # 8-GPU spot task (deficit 8, 1 victim): Eq. 19 (fewest victims) wants the last node; a cap on
    # the candidates ordered by deficit would never look at it
    running = [rt(f"s{n}_{c}", "spot", n, [c]) for n in range(70) for c in range(7)]
    running.append(rt("big", "spot", 70, list(range(8))))
    s = snapshot([8] * 71, running, now=1800.0, g=100, f=1)
    p = make_scheduler("gfs").schedule(s, TaskRequest("h", "hp", 8))
    assert p is not None and p.nodes == ("n70",) and p.victims == ("big",)


def test_gfs_ablations_configure_the_quota_they_are_named_for() -> None:
    """GFS-E forecasts with last week's peak, GFS-D keeps eta fixed; GFS itself does neither."""
    assert make_scheduler("gfs").quota == QuotaRule("orglinear", adapt_eta=True)
    assert make_scheduler("gfs_e").quota == QuotaRule("last_week_peak", adapt_eta=True)
    assert make_scheduler("gfs_d").quota == QuotaRule("orglinear", adapt_eta=False)


def test_stable_hash_is_32_bit_fnv_1a() -> None:
    # the published FNV-1a test vectors: seeds of the random preemptor's draws across runs
    assert stable_hash("") == 0x811C9DC5
    assert stable_hash("a") == 0xE40C292C
    assert stable_hash("foobar") == 0xBF9CF968


@pytest.mark.parametrize(("name", "node_choice", "random_victims", "order", "strict"), [  # GFS: the live preset's queue
    ("gfs", "min_cost", False, "size", False), ("gfs_e", "min_cost", False, "size", False),
    ("gfs_d", "min_cost", False, "size", False), ("gfs_s", "min_cost", False, "size", False),
    ("gfs_p", "random", True, "size", False), ("gfs_sp", "random", True, "size", False),
    ("yarn_cs", "first", False, "fcfs", True), ("chronus", "first", False, "fcfs", False),
    ("chronus_rel", "first", False, "fcfs", False), ("lyra", "min_cost", False, "fcfs", False),
    ("fgd", "first", False, "fcfs", False),
])
def test_every_scheduler_has_its_preemption_and_queue_rules(name: str, node_choice: str, random_victims: bool,
                                                           order: str, strict: bool) -> None:
    s = make_scheduler(name)
    assert s.preemptor is not None
    assert s.preemptor.node_choice == node_choice and s.preemptor.random_victims is random_victims
    assert s.queue.order == order and s.queue.strict is strict


def test_hp_colocate_gathers_hp_pods_on_nodes_hp_already_uses() -> None:
    # n0: 2 cards to HP; n1: 6 cards to spot. Packing sends a 1-GPU HP pod to the fuller n1
    # (freeing n0 for nothing); hp_colocate keeps it beside the HP on n0, so n1 (spot only) stays
    # whole for an HP gang that may preempt there. Spot placement is unchanged.
    s = snapshot([8, 8], [rt("a", "hp", 0, [0, 1]), rt("b", "spot", 1, [0, 1, 2, 3, 4, 5])])
    assert make_scheduler("gfs").schedule(s, TaskRequest("h", "hp", 1)).nodes == ("n1",)
    assert make_scheduler("gfs", hp_score="hp_colocate").schedule(s, TaskRequest("h", "hp", 1)).nodes == ("n0",)
    assert make_scheduler("gfs", hp_score="hp_colocate").schedule(s, TaskRequest("s", "spot", 1)).nodes == \
        make_scheduler("gfs").schedule(s, TaskRequest("s", "spot", 1)).nodes
    with pytest.raises(InvalidInput, match="hp_score"):
        make_scheduler("gfs", hp_score="spread")


def test_hp_nodes_first_places_spot_beside_hp_and_keeps_hp_free_nodes_whole() -> None:
    # n0: 2 cards to HP; n1: 6 cards to spot. Packing sends a 1-GPU spot pod to the fuller n1;
    # hp_nodes_first sends it to n0 (HP holds GPUs there), so n1 keeps no HP and less spot for an
    # HP pod of a whole node. HP placement is unchanged.
    s = snapshot([8, 8], [rt("a", "hp", 0, [0, 1]), rt("b", "spot", 1, [0, 1, 2, 3, 4, 5])])
    assert make_scheduler("gfs").schedule(s, TaskRequest("s", "spot", 1)).nodes == ("n1",)
    assert make_scheduler("gfs", spot_score="hp_nodes_first").schedule(s, TaskRequest("s", "spot", 1)).nodes == ("n0",)
    assert make_scheduler("gfs", spot_score="hp_nodes_first").schedule(s, TaskRequest("h", "hp", 1)).nodes == \
        make_scheduler("gfs").schedule(s, TaskRequest("h", "hp", 1)).nodes
    with pytest.raises(InvalidInput, match="spot_score"):
        make_scheduler("gfs", spot_score="spread")
