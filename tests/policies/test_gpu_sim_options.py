"""GPU cluster simulator: the release-vs-paper options on hand-computed runs (HP demand from running
HP tasks, per-GPU-model quota pools, hourly max, eviction per guarantee hour, the measured
window, Chronus's lease release)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from controlplane.core.errors import InvalidInput
from policies.placement import TaskRequest
from policies.schedulers import make_scheduler
from policies.sim.gpu_sim import GpuSimulator, SimConfig, simulate
from policies.sim.workloads import NodeSpec, SimTask, Workload

H = 3600.0


def task(tid: str, prio: str, g: float, submit_h: float, dur_h: float, pods: int = 1,
         models: tuple[str, ...] | None = None) -> SimTask:
    return SimTask(TaskRequest(tid, prio, g, pods, models, "t"), submit_h * H, dur_h * H)  # type: ignore[arg-type]


def wl(tasks: list[SimTask], models: tuple[str, ...] = ("A100", "A100")) -> Workload:
    nodes = NodeSpec(np.array([f"n{i}" for i in range(len(models))]), np.array(models),
                     np.full(len(models), 8, dtype=np.int64))
    return Workload("hand", nodes, sorted(tasks, key=lambda t: t.submit_s), ("t",))


def test_hp_demand_counts_running_hp_not_a_queued_gang() -> None:
    # HP "a" holds 4 GPUs for 3 h; the 2 x 8 HP gang cannot start before it ends. The first hour's
    # demand sample (hourly max) is 4 GPUs when only running HP counts, 4 + 16 with queued HP.
    tasks = [task("a", "hp", 4, 0, 3), task("gang", "hp", 8, 0.1, 1, pods=2)]
    out = {}
    for demand in ("running", "held_queued"):
        sim = GpuSimulator(wl(tasks), make_scheduler("gfs"), SimConfig(hp_demand=demand))
        sim.run()
        assert sim.quota_loop is not None
        out[demand] = [float(h[0]) for h in sim.quota_loop.hours[:4]]
    assert out["running"] == [4.0, 4.0, 4.0, 16.0]  # the gang runs from 3 h to 4 h
    assert out["held_queued"] == [20.0, 20.0, 20.0, 16.0]


def test_hourly_mean_or_max_of_the_samples() -> None:
    tasks = [task("a", "hp", 8, 0, 0.5)]  # holds 8 GPUs for the first half hour only
    hours = {}
    for hourly in ("max", "mean"):
        sim = GpuSimulator(wl(tasks + [task("b", "hp", 1, 1.5, 0.1)]), make_scheduler("gfs"), SimConfig(hourly=hourly))
        sim.run()
        assert sim.quota_loop is not None
        hours[hourly] = float(sim.quota_loop.hours[0][0])
    # ticks at 5, 10, ..., 60 min: the task ends at 30 min (its finish goes before the tick)
    assert hours == {"max": 8.0, "mean": pytest.approx(8.0 * 5 / 12)}


def test_quota_pools_per_gpu_model_keep_a_spot_task_off_a_full_model() -> None:
    # A100: HP holds 7 GPUs for the first 1.5 h, then 5; V100: no HP. GFS-e forecasts the last
    # week's peak: 7 on A100, so A100's spot inventory is 8 - 7 = 1 GPU and the 2-GPU spot task
    # at 2.1 h goes to V100; one cluster-wide pool (16 - 7 = 9 GPUs) lets best fit pack it on A100.
    tasks = [task("h5", "hp", 5, 0, 6, models=("A100",)), task("h2", "hp", 2, 0, 1.5, models=("A100",)),
             task("s", "spot", 2, 2.1, 1)]
    models = ("A100", "V100")
    per_model = Spy(wl(tasks, models), make_scheduler("gfs_e"), SimConfig(last_week_peak_min_h=1))
    r = per_model.run()
    assert per_model.pool_names == ["A100", "V100"] and list(per_model.pool_cap) == [8.0, 8.0]
    assert [ql.capacity for ql in per_model.quota_loops] == [8.0, 8.0]
    assert per_model.nodes["s"] == [1] and r.records["s"].jqt_s == 0.0
    one = Spy(wl(tasks, models), make_scheduler("gfs_e"), SimConfig(last_week_peak_min_h=1, pools="cluster"))
    one.run()
    assert one.pool_names == ["all"] and one.nodes["s"] == [0]


class Spy(GpuSimulator):
    """The simulator, recording the nodes each task starts on."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.nodes: dict[str, list[int]] = {}

    def _start(self, rec: Any, p: Any) -> None:
        self.nodes[rec.task.id] = [pod.node for pod in p.pods]
        super()._start(rec, p)


def test_eviction_per_guarantee_hour_and_per_run() -> None:
    # spot runs 0-1.5 h (evicted by the HP task, 1 h checkpointed), again 2.5-4.5 h: guarantee
    # hours completed at 1 h and 3.5 h, one completion, one eviction: 1 / (1 + 2 + 1)
    w = wl([task("s", "spot", 8, 0, 3), task("h", "hp", 8, 1.5, 1)], ("A100",))
    r = simulate(w, make_scheduler("yarn_cs"))
    assert r.records["s"].guarantee_hours == 2
    assert r.spot.eviction_rate == pytest.approx(0.5)
    assert r.spot.eviction_per_guarantee_hour == pytest.approx(0.25)
    assert r.summary()["eviction_per_gh"] == pytest.approx(0.25)


def test_only_tasks_submitted_in_the_measured_window_count() -> None:
    w = wl([task("early", "spot", 1, 0, 1), task("late", "spot", 1, 5, 2), task("h", "hp", 1, 6, 1)])
    r = simulate(w, make_scheduler("gfs"), SimConfig(measure_from_s=4 * H))
    assert (r.spot.tasks, r.spot.finished, r.hp.tasks) == (1, 1, 1)
    assert r.spot.jct_mean_s == pytest.approx(2 * H)


def test_chronus_as_released_requeues_every_lease_and_pays_the_restart() -> None:
    # a 1 h HP task is released at 1,200, 2,400 and 3,600 s and pays 120 s after each restart:
    # 3,600 + 3 x 120 = 3,960 s; a lease restart is not a new run
    w = wl([task("h", "hp", 8, 0, 1)], ("A100",))
    r = simulate(w, make_scheduler("chronus_rel"), SimConfig(check_invariants=True))
    assert r.records["h"].finish_s == pytest.approx(3960.0)
    assert r.records["h"].runs == 1 and r.hp.jqt_mean_s == 0.0
    assert simulate(w, make_scheduler("chronus")).records["h"].finish_s == pytest.approx(H)


def test_baselines_behind_the_quota_and_bad_options() -> None:
    assert make_scheduler("yarn_cs").quota is None
    assert make_scheduler("yarn_cs", quota=True).quota is not None
    for bad in ({"hp_demand": "queued"}, {"hourly": "median"}, {"eta_rate": "x"}, {"pools": "node"}):
        with pytest.raises(InvalidInput, match=next(iter(bad))):
            SimConfig(**bad)  # type: ignore[arg-type]


def test_pools_for_a_model_list_are_the_pools_of_those_models() -> None:
    per_model = GpuSimulator(wl([task("s", "spot", 1, 0, 1)], ("A100", "V100")), make_scheduler("gfs_e"))
    assert list(per_model._pools_for(("V100",))) == [1]
    assert list(per_model._pools_for(("A100", "V100"))) == [0, 1]
    assert list(per_model._pools_for(None)) == [0, 1]
    one = GpuSimulator(wl([task("s", "spot", 1, 0, 1)], ("A100", "V100")), make_scheduler("gfs_e"),
                       SimConfig(pools="cluster"))
    assert list(one._pools_for(("V100",))) == [0]


def test_hp_react_caps_the_quota_by_the_gpus_queued_hp_asks_for() -> None:
    # one 8-GPU pool: HP "a" runs on 6 GPUs, the 8-GPU HP "big" queues behind it. With
    # hp_react='queued' the pool's quota is at most 8 - (6 + 8) -> 0 from the first tick, so the
    # 1-GPU spot task that arrives after it waits for "big"; without it, it takes an idle GPU
    tasks = [task("a", "hp", 6, 0, 1), task("big", "hp", 8, 0.05, 1), task("s", "spot", 1, 0.1, 0.5)]
    nodes = ("A100",)
    off = simulate(wl(tasks, nodes), make_scheduler("gfs"), SimConfig(hp_react="off"))
    on = simulate(wl(tasks, nodes), make_scheduler("gfs"), SimConfig(hp_react="queued"))
    assert off.records["s"].jqt_s == 0.0 and off.records["s"].evictions == 0
    assert on.records["s"].jqt_s == pytest.approx(2 * H - 0.1 * H)  # after "big" (1 h to 2 h)
    with pytest.raises(InvalidInput, match="hp_react"):
        SimConfig(hp_react="sometimes")


def test_gfs_queue_fcfs_takes_the_submission_order_and_backfills() -> None:
    # the 8-GPU HP task waits for "a"; under fcfs the 1-GPU HP task that came after it still
    # starts at once on the idle GPUs (backfill, as under GFS's size order), so "big" waits for it too
    tasks = [task("a", "hp", 4, 0, 1), task("big", "hp", 8, 0.1, 1), task("small", "hp", 1, 0.2, 1)]
    r = simulate(wl(tasks, ("A100",)), make_scheduler("gfs", gfs_queue="fcfs"))
    assert r.records["small"].jqt_s == 0.0 and r.records["big"].jqt_s == pytest.approx(1.1 * H)


def test_spot_guard_lets_a_spot_task_wider_than_the_quota_start_after_theta() -> None:
    from policies.gfs_options import GFS_VARIANTS

    # HP "a" holds 6 of 8 GPUs for 24.5 h; GFS-e forecasts the last week's peak (6), so with eta
    # clamped at 1 the quota is 8 - 6 = 2 for a week after "a" ends. The 4-GPU spot task that
    # arrives at 25 h waits for that week without the guard; with it, the quota admits it at the
    # first tick after theta (1 h)
    tasks = [task("a", "hp", 6, 0, 24.5), task("s", "spot", 4, 25, 1)]
    nodes = ("A100",)
    runs = {v: simulate(wl(tasks, nodes), make_scheduler("gfs_e"), SimConfig.for_options(GFS_VARIANTS[v]))
            for v in ("fcfs_eta_max_1", "fcfs_eta_max_1_spot_guard")}
    assert runs["fcfs_eta_max_1"].records["s"].jqt_s > 100 * H
    assert runs["fcfs_eta_max_1_spot_guard"].records["s"].jqt_s == pytest.approx(H)
    with pytest.raises(InvalidInput, match="spot_guard"):
        SimConfig(spot_guard="always")


def test_hp_reserve_holds_the_node_of_least_hp_for_a_waiting_gang() -> None:
    # n0: HP "a" (2 GPUs, 10 h); n1: HP "b" (1 GPU, 1 h) and spot "s" (4 GPUs). The 8-GPU HP "big"
    # waits for a node without HP. The 1-GPU HP "c" (0.5 h) goes by packing to the fuller n1, so
    # "big" waits for "a" (10 h); with hp_reserve n1 (least HP) is held for "big" from the first
    # tick after it waited a tick, "c" goes to n0, and "big" starts when "b" ends, evicting "s"
    tasks = [task("a", "hp", 2, 0, 10, models=("A",)), task("b", "hp", 1, 0, 1, models=("B",)),
             task("s", "spot", 4, 0, 20, models=("B",)), task("big", "hp", 8, 0.1, 1), task("c", "hp", 1, 0.5, 10)]
    off = simulate(wl(tasks, ("A", "B")), make_scheduler("gfs"), SimConfig(hp_reserve="off"))
    on = simulate(wl(tasks, ("A", "B")), make_scheduler("gfs"), SimConfig(hp_reserve="head"))
    assert off.records["big"].jqt_s == pytest.approx(9.9 * H)
    assert on.records["big"].jqt_s == pytest.approx(0.9 * H)
    assert on.records["s"].evictions == 1 and on.records["c"].jqt_s == 0.0
    with pytest.raises(InvalidInput, match="hp_reserve"):
        SimConfig(hp_reserve="all")


def test_spot_guard_4h_admits_after_four_hours_and_1ph_once_an_hour() -> None:
    from policies.gfs_options import GFS_VARIANTS

    # as above (quota 2 of 8 for a week), with two spot tasks wider than the quota: the 4-h
    # guard admits the oldest at 29 h and the next one a tick later; with _1ph the next raise
    # waits an hour (H)
    tasks = [task("a", "hp", 6, 0, 24.5), task("s1", "spot", 4, 25, 10), task("s2", "spot", 3, 25.05, 10)]
    runs = {v: simulate(wl(tasks, ("A100",)), make_scheduler("gfs_e", gfs_queue="fcfs"),
                        SimConfig.for_options(GFS_VARIANTS[v]))
            for v in ("fcfs_eta_max_1_calm_guard_4h", "fcfs_eta_max_1_calm_guard_4h_1ph")}
    for r in runs.values():
        assert r.records["s1"].jqt_s == pytest.approx(4 * H)
    assert runs["fcfs_eta_max_1_calm_guard_4h"].records["s2"].jqt_s == pytest.approx((29 + 5 / 60 - 25.05) * H)
    assert runs["fcfs_eta_max_1_calm_guard_4h_1ph"].records["s2"].jqt_s == pytest.approx((30 - 25.05) * H)


def test_hp_drain_marks_the_node_of_least_hp_and_evicts_its_spot_at_once_or_keeps_it() -> None:
    # as above: the 8-GPU HP "big" (a whole node) waits; at the first tick after it waited a tick
    # (0.25 h) the drain marks n1 (least HP): "c" goes to n0, "big" starts when "b" ends (1 h).
    # drain evicts the spot "s" on n1 at 0.25 h; drain_keep lets it run until "big" preempts it
    tasks = [task("a", "hp", 2, 0, 10, models=("A",)), task("b", "hp", 1, 0, 1, models=("B",)),
             task("s", "spot", 4, 0, 20, models=("B",)), task("big", "hp", 8, 0.1, 1), task("c", "hp", 1, 0.5, 10)]
    runs = {mode: simulate(wl(tasks, ("A", "B")), make_scheduler("gfs"), SimConfig(hp_reserve=mode))
            for mode in ("drain", "drain_keep")}
    for r in runs.values():
        assert r.records["big"].jqt_s == pytest.approx(0.9 * H)
        assert r.records["c"].jqt_s == 0.0 and r.records["s"].evictions == 1
    assert runs["drain"].records["s"].jqt_s == pytest.approx(1.75 * H)  # evicted at 0.25 h, back at 2 h
    assert runs["drain_keep"].records["s"].jqt_s == pytest.approx(1.0 * H)  # evicted at 1 h


def test_hp_drain_waits_for_whole_node_pods_only() -> None:
    # a 4-GPU HP pod on 8-GPU nodes does not need a whole node: no drain mark, as with off
    tasks = [task("a", "hp", 6, 0, 3, models=("A",)), task("b", "hp", 6, 0, 3, models=("B",)),
             task("s", "spot", 1, 0.05, 20, models=("B",)), task("mid", "hp", 4, 0.1, 1)]
    off = simulate(wl(tasks, ("A", "B")), make_scheduler("gfs"), SimConfig(hp_reserve="off"))
    on = simulate(wl(tasks, ("A", "B")), make_scheduler("gfs"), SimConfig(hp_reserve="drain"))
    assert on.records["s"].evictions == off.records["s"].evictions
    assert on.records["mid"].jqt_s == off.records["mid"].jqt_s


def test_calm3_guard_acts_under_three_percent_and_waits_four_hours() -> None:
    from policies.quota import spot_guard_acts, spot_guard_gap_s, spot_guard_wait_s

    assert spot_guard_acts("oldest_calm3_4h_1ph", 0.029, 0.1) and not spot_guard_acts("oldest_calm3_4h_1ph", 0.03, 0.1)
    assert spot_guard_acts("oldest_calm_4h_1ph", 0.03, 0.1)  # the 5% guard still acts there
    assert spot_guard_wait_s("oldest_calm3_4h_1ph", H) == 4 * H and spot_guard_gap_s("oldest_calm3_4h_1ph", 1) == H


def test_spot_guard_2ph_raises_the_quota_once_per_half_hour() -> None:
    from policies.gfs_options import GFS_VARIANTS

    # as the 4 h guard above: s1 admitted at 29 h, s2 half an hour later (the 1ph guard: an hour)
    tasks = [task("a", "hp", 6, 0, 24.5), task("s1", "spot", 4, 25, 10), task("s2", "spot", 3, 25.05, 10)]
    r = simulate(wl(tasks, ("A100",)), make_scheduler("gfs_e", gfs_queue="fcfs"),
                 SimConfig.for_options(GFS_VARIANTS["fcfs_eta_max_1_calm_guard_4h_2ph"]))
    assert r.records["s1"].jqt_s == pytest.approx(4 * H)
    assert r.records["s2"].jqt_s == pytest.approx((29.5 - 25.05) * H)


def test_hpq_guard_stands_down_while_hp_for_the_pool_is_queued() -> None:
    from policies.gfs_options import GFS_VARIANTS
    from policies.quota import spot_guard_gap_s, spot_guard_wait_s, spot_guard_yields_to_hp

    assert spot_guard_yields_to_hp("oldest_calm_2h_2ph_hpq") and not spot_guard_yields_to_hp("oldest_calm_2h_2ph")
    assert spot_guard_wait_s("oldest_calm_2h_2ph_hpq", H) == 2 * H and spot_guard_gap_s("oldest_calm_2h_2ph_hpq", 1) == H / 2
    # as the 4 h guard above (quota 2 of 8 for a week), with HP "c" (1 GPU) from 24.6 h to 40 h,
    # so the 8-GPU HP "big" queues from 25 h to 40 h: the 2 h guard admits the 4-GPU spot "s1" at
    # 27 h and "big" evicts it at 40 h; the _hpq guard keeps it out while "big" waits
    tasks = [task("a", "hp", 6, 0, 24.5), task("c", "hp", 1, 24.6, 15.4), task("s1", "spot", 4, 25, 20),
             task("big", "hp", 8, 25, 0.5)]
    runs = {v: simulate(wl(tasks, ("A100",)), make_scheduler("gfs_e", gfs_queue="fcfs"),
                        SimConfig.for_options(GFS_VARIANTS[v]))
            for v in ("fcfs_eta_max_1_calm_guard_2h_2ph", "fcfs_eta_max_1_calm_guard_2h_2ph_hpq")}
    plain, hpq = (runs[v].records["s1"] for v in runs)
    assert plain.evictions == 1 and plain.jqt_s >= 2 * H
    assert hpq.evictions == 0 and hpq.jqt_s >= 15 * H


def test_bk_guard_doubles_its_wait_after_a_task_it_admitted_is_evicted() -> None:
    from policies.gfs_options import GFS_VARIANTS
    from policies.quota import GUARD_BACKOFF_MAX, guard_backoff, spot_guard_backs_off

    assert spot_guard_backs_off("oldest_calm_2h_2ph_bk") and not spot_guard_backs_off("oldest_calm_2h_2ph")
    assert guard_backoff(1.0, True) == 2.0 and guard_backoff(GUARD_BACKOFF_MAX, True) == GUARD_BACKOFF_MAX
    assert guard_backoff(4.0, False) == 2.0 and guard_backoff(1.0, False) == 1.0
    # as the _hpq case with HP "c" ending at 27.5 h: the 2 h guard admits spot "s1" at 27 h and
    # HP "big" evicts it at 27.5 h, within H; back in the queue, the plain guard lets it in again
    # 2 h later, the _bk guard 4 h later (one that held its GPUs for H would not count)
    tasks = [task("a", "hp", 6, 0, 24.5), task("c", "hp", 1, 24.6, 2.9), task("s1", "spot", 4, 25, 20),
             task("big", "hp", 8, 25, 0.5)]
    runs = {v: simulate(wl(tasks, ("A100",)), make_scheduler("gfs_e", gfs_queue="fcfs"),
                        SimConfig.for_options(GFS_VARIANTS[v]))
            for v in ("fcfs_eta_max_1_calm_guard_2h_2ph", "fcfs_eta_max_1_calm_guard_2h_2ph_bk",
                      "fcfs_eta_max_1_calm_guard_2h_2ph_bkall")}
    plain, bk, bkall = (runs[v].records["s1"] for v in runs)
    assert plain.evictions == bk.evictions == bkall.evictions == 1
    assert bk.jqt_s - plain.jqt_s == pytest.approx(2 * H)
    assert bkall.jqt_s == pytest.approx(bk.jqt_s)


def test_bkall_guard_halves_its_wait_per_quiet_day_only() -> None:
    from policies.quota import GUARD_QUIET_S, guard_quiet_decay, spot_guard_counts_all_starts

    assert spot_guard_counts_all_starts("oldest_calm_4h_2ph_bkall")
    assert not spot_guard_counts_all_starts("oldest_calm_4h_2ph_bk")
    assert guard_quiet_decay(8.0, 0.9 * GUARD_QUIET_S) == (8.0, 0.0)
    assert guard_quiet_decay(8.0, 2.5 * GUARD_QUIET_S) == (2.0, 2 * GUARD_QUIET_S)
    assert guard_quiet_decay(2.0, 5 * GUARD_QUIET_S)[0] == 1.0


def test_preempt_reach_cards_lets_a_whole_node_hp_pod_evict_fractional_spot_pods() -> None:
    # one 8-GPU node: two 0.81-GPU spot pods run for 10 h; an 8-GPU HP pod arrives at 1 h. With the
    # idle + spot bound (6 + 1.62 < 8) Alg. 2 never tries the node and the pod waits ~9 h for the
    # spot pods to end; with the exact reach it evicts both at once.
    from policies.gfs_options import GFS_VARIANTS
    tasks = [task("s1", "spot", 0.81, 0, 10), task("s2", "spot", 0.81, 0, 10), task("big", "hp", 8, 1, 1)]
    waits = {}
    for reach in ("spot_share", "cards", "whole_node"):
        r = simulate(wl(tasks, ("A100",)), make_scheduler("gfs", preempt_reach=reach), SimConfig())
        waits[reach] = (r.records["big"].jqt_s, r.spot.evictions)
    assert waits["spot_share"] == (pytest.approx(9 * H + 300.0), 0)  # the spot pods start at the first tick
    assert waits["cards"] == waits["whole_node"] == (0.0, 2)
    assert GFS_VARIANTS["fcfs_eta_max_1_calm_guard_2h_1ph_share"].preempt_reach == "spot_share"
    assert GFS_VARIANTS["as_released"].preempt_reach == "cards"  # the release's whole-card reach
