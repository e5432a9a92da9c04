"""GPU cluster simulator: hand-computed runs, checkpoint resume, conservation, the quota loop."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import pytest

from controlplane.core.errors import InvalidInput
from policies.forecast import Forecast
from policies.gfs_options import GFS_VARIANTS
from policies.placement import TaskRequest
from policies.schedulers import SCHEDULERS, make_scheduler
from policies.sim.gpu_sim import (
    GpuSimulator,
    QuotaLoop,
    SimConfig,
    TaskRecord,
    _MemoBound,
    shape_key,
    simulate,
)
from policies.sim.workloads import GfsA100Config, NodeSpec, SimTask, Workload, gfs_a100

H = 3600.0


def wl(tasks: list[SimTask], nodes: int = 1, gpus: int = 8, tenants: tuple[str, ...] = ("t",)) -> Workload:
    return Workload("hand", NodeSpec.uniform(nodes, gpus), sorted(tasks, key=lambda t: t.submit_s), tenants)


def task(tid: str, prio: str, g: float, submit_h: float, dur_h: float, pods: int = 1) -> SimTask:
    return SimTask(TaskRequest(tid, prio, g, pods, None, "t"), submit_h * H, dur_h * H)  # type: ignore[arg-type]


def test_eviction_resumes_from_the_last_checkpoint() -> None:
    # spot 8 GPUs for 3 h at 0; HP 8 GPUs for 1 h at 1.5 h evicts it; 1 h of work was checkpointed,
    # the spot task restarts when the HP task ends (2.5 h) and needs 2 more hours: done at 4.5 h
    w = wl([task("s", "spot", 8, 0, 3), task("h", "hp", 8, 1.5, 1)])
    r = simulate(w, make_scheduler("yarn_cs"), SimConfig(check_invariants=True))
    s, h = r.records["s"], r.records["h"]
    assert s.finish_s == pytest.approx(4.5 * H) and s.jqt_s == pytest.approx(1.0 * H)
    assert s.runs == 2 and s.evictions == 1 and r.spot.eviction_rate == pytest.approx(0.5)
    assert h.finish_s == pytest.approx(2.5 * H) and h.jqt_s == 0.0
    assert r.hp.jct_mean_s == pytest.approx(H) and r.spot.jct_mean_s == pytest.approx(4.5 * H)


def test_preemption_stats_count_the_placements_that_evicted() -> None:
    # the run above: one HP placement evicts the 8-GPU spot task 1.5 h after its start; a second HP
    # task at 5 h finds the node idle and evicts nothing
    w = wl([task("s", "spot", 8, 0, 3), task("h", "hp", 8, 1.5, 1), task("h2", "hp", 8, 5, 1)])
    st = simulate(w, make_scheduler("gfs")).preemption
    assert (st.preemptions, st.victims, st.victim_gpus) == (1, 1, 8.0)
    assert st.ages_s == [pytest.approx(1.5 * H)]
    assert st.share_younger_than(2 * H) == 1.0 and st.share_younger_than(H) == 0.0
    late = simulate(w, make_scheduler("gfs"), SimConfig(measure_from_s=2 * H)).preemption
    assert late.preemptions == 0 and late.share_younger_than(H) == 0.0  # before the measured window


def test_quota_stats_count_eta_at_its_clamp_and_the_forecast_term_binding() -> None:
    # 8 idle GPUs, forecast HP demand 2 with no spread: f(p, H) = 6; eta 1 -> quota 6 < S0 + Sa = 8
    # (the forecast term binds); eta 4 (its clamp) -> 24, so S0 + Sa = 8 sets the quota
    def fresh(cfg: SimConfig) -> GpuSimulator:
        sim = GpuSimulator(wl([task("x", "spot", 1, 0, 1)]), make_scheduler("gfs"), cfg)
        sim.quota_loops[0].forecast = _MemoBound(Forecast(np.array([[2.0]]), np.array([[0.0]])))
        sim._ticks = 1  # not an hour's end: the forecast stays
        return sim
    sim = fresh(SimConfig.for_options(GFS_VARIANTS["as_released"]))  # eta's clamp at 4
    sim._quota_tick()
    assert sim.quota_loops[0].quota == pytest.approx(6.0)
    sim.quota_loops[0].allocator._eta = sim.quota_loops[0].allocator.params.eta_max
    sim._quota_tick()
    assert sim.quota_loops[0].quota == pytest.approx(8.0)
    st = sim.quota_stats
    assert (st.pool_ticks, st.eta_at_max, st.forecast_binds) == (2, 1, 1)
    late = fresh(SimConfig(measure_from_s=H))
    late._quota_tick()
    assert late.quota_stats.pool_ticks == 0  # before the measured window


def test_checkpoint_interval_is_configurable() -> None:
    w = wl([task("s", "spot", 8, 0, 3), task("h", "hp", 8, 1.5, 1)])
    r = simulate(w, make_scheduler("yarn_cs"), SimConfig(checkpoint_s=0.5 * H))
    assert r.records["s"].finish_s == pytest.approx(4.0 * H)  # 1.5 h saved, 1.5 h left after 2.5 h


def test_allocation_rate_hand_computed() -> None:
    w = wl([task("a", "hp", 8, 0, 5), task("b", "hp", 4, 10, 1)])
    r = simulate(w, make_scheduler("gfs"))
    assert r.allocation_rate == pytest.approx(8 * 5 / (8 * 10))
    assert r.summary()["allocation_rate"] == pytest.approx(0.5)  # the key the benchmarks read


def test_hp_waits_when_only_hp_runs_and_queue_order() -> None:
    w = wl([task("a", "hp", 8, 0, 2), task("b", "hp", 8, 1, 1)])
    r = simulate(w, make_scheduler("gfs"))
    assert r.records["b"].jqt_s == pytest.approx(1 * H) and r.hp.jqt_mean_s == pytest.approx(0.5 * H)


def test_strict_fcfs_blocks_behind_the_head_but_backfill_does_not() -> None:
    tasks = [task("a", "spot", 6, 0, 2), task("big", "spot", 8, 0.1, 1), task("small", "spot", 2, 0.2, 1)]
    yarn = simulate(wl(tasks), make_scheduler("yarn_cs"))
    lyra = simulate(wl(tasks), make_scheduler("lyra"))
    assert yarn.records["small"].jqt_s == pytest.approx(2.8 * H)  # waits for "big" (2 h to 3 h)
    assert lyra.records["small"].jqt_s == 0.0  # backfills the 2 free cards


def test_gfs_queue_order_size_vs_the_releases() -> None:
    # one 8-GPU node held by HP for 1 h; queued spot: "small" 2 GPUs (0.1 h), "big" 8 GPUs (0.2 h).
    # size (ascending g): "small" starts at 1 h, "big" waits for it (1 h to 2 h) and starts at 2 h;
    # size_release (descending g, spot.py): "big" starts at 1 h, "small" at 2 h
    tasks = [task("h", "hp", 8, 0, 1), task("small", "spot", 2, 0.1, 1), task("big", "spot", 8, 0.2, 1)]
    size = simulate(wl(tasks), make_scheduler("gfs"))
    rel = simulate(wl(tasks), make_scheduler("gfs", gfs_queue="size_release"))
    assert size.records["small"].jqt_s == pytest.approx(0.9 * H) and size.records["big"].jqt_s == pytest.approx(1.8 * H)
    assert rel.records["big"].jqt_s == pytest.approx(0.8 * H) and rel.records["small"].jqt_s == pytest.approx(1.9 * H)


def test_gfs_queue_order_release_puts_more_gpus_first_for_hp_and_fewer_pods_first_for_spot() -> None:
    sim = GpuSimulator(wl([task("x", "hp", 1, 0, 1)]), make_scheduler("gfs", gfs_queue="size_release"))
    sim.records = {t: _rec(t, s) for t, s in (("a", 0.0), ("b", 5.0))}
    hp1, hp8 = ("hp", 1.0, 4, None), ("hp", 8.0, 1, None)
    sp_w1, sp_w4, sp_g1 = ("spot", 4.0, 1, None), ("spot", 4.0, 4, None), ("spot", 1.0, 1, None)
    key = sim._order_key
    assert key(hp8, deque(["b"])) < key(hp1, deque(["a"]))  # more GPUs per pod first, then submission
    assert key(sp_w1, deque(["b"])) < key(sp_w4, deque(["a"])) < key(sp_g1, deque(["a"]))
    with pytest.raises(InvalidInput, match="gfs_queue"):
        make_scheduler("gfs", gfs_queue="lifo")
    assert make_scheduler("yarn_cs", gfs_queue="size_release").queue.order == "fcfs"  # GFS family only


def _rec(tid: str, submit_s: float) -> TaskRecord:
    return TaskRecord(SimTask(TaskRequest(tid, "spot", 1.0), submit_s, 1.0), 1.0, submit_s)


@pytest.mark.parametrize("name", SCHEDULERS)
def test_conservation_every_scheduler(name: str) -> None:
    cfg = GfsA100Config(days=1.5, nodes=6, hp_tasks=160, spot_tasks=90, spot_scale=2.0, seed=7)
    w = gfs_a100(cfg)
    sim = GpuSimulator(w, make_scheduler(name), SimConfig(check_invariants=True))
    r = sim.run()
    assert all(rec.finished == 1 for rec in r.records.values())  # every task finished exactly once
    assert r.hp.finished + r.spot.finished + len(sim.unschedulable) == len(w.tasks)
    assert np.allclose(sim.card_free, (np.arange(8)[None, :] < sim.gpus[:, None]))  # all cards back
    assert not sim.running and sim.spot_alloc == pytest.approx(0) and sim.hp_alloc == pytest.approx(0)
    assert r.hp.evictions == 0  # HP tasks are never evicted
    for rec in r.records.values():
        assert rec.finish_s >= rec.task.submit_s + rec.task.duration_s - 1e-6
    assert 0 < r.allocation_rate <= 1


def test_a_task_bigger_than_the_cluster_is_left_out_not_waited_for() -> None:
    w = wl([task("huge", "hp", 8, 0, 1, pods=3), task("ok", "spot", 8, 0, 1)], nodes=2)
    sim = GpuSimulator(w, make_scheduler("gfs"))
    r = sim.run()
    assert sim.unschedulable == ["huge"] and r.records["ok"].finished == 1


def test_contended_run_evicts_and_quota_restrains_spot() -> None:
    cfg = GfsA100Config(days=2, nodes=10, hp_tasks=140, spot_tasks=80, spot_scale=2.0, seed=3)
    w = gfs_a100(cfg)
    yarn = simulate(w, make_scheduler("yarn_cs"), SimConfig(check_invariants=True))
    gfs = GpuSimulator(w, make_scheduler("gfs"), SimConfig(check_invariants=True))
    rg = gfs.run()
    assert yarn.spot.evictions > 0
    assert gfs.quota_loop is not None and len(gfs.quota_loop.hours) >= 47  # hourly demand history
    assert gfs.quota_loop.forecast is None  # OrgLinear needs 192 h: no quota yet
    assert rg.hp.finished == yarn.hp.finished
    e = QuotaWatch(w, make_scheduler("gfs_e"))
    e.run()
    assert e.quota_loop is not None and e.quota_loop.forecast is not None and e.quota_loop.quota is not None
    assert e.quota_loop.allocator.updates > 500  # Eq. 11 every 300 s
    # the quota restrains spot: no spot start ever takes the pool's spot GPUs over the quota
    # in force, and it binds (spot tasks that fit the free GPUs were held back by it)
    assert len(e.spot_starts) > 50
    assert max(alloc - quota for alloc, quota in e.spot_starts) <= 1e-6
    assert e.held_by_quota > 0


class QuotaWatch(GpuSimulator):
    """The simulator, recording each spot start against the quota and each quota refusal."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spot_starts: list[tuple[float, float]] = []  # (spot GPUs after the start, quota)
        self.held_by_quota = 0

    def _start(self, rec: Any, p: Any) -> None:
        super()._start(rec, p)
        ql = self.quota_loop
        if not rec.task.request.is_hp and ql is not None and ql.quota is not None:
            self.spot_starts.append((self.spot_alloc, ql.quota))

    def _cheap_ok(self, shape: Any) -> bool:
        ok = super()._cheap_ok(shape)
        prio, g, w, _ = shape
        ql = self.quota_loop
        if (not ok and prio == "spot" and ql is not None and ql.quota is not None
                and float(self.free.sum()) >= g * w):
            self.held_by_quota += 1
        return ok


class _RecordingModel:
    """Stands in for a fitted OrgLinear: records the ``start_hour`` each predict gets, and the hour
    of week of the hour after the history (``start_hour`` + its length)."""

    lookback = 2

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.next_hours: list[int] = []

    def predict(self, history: np.ndarray, horizon: int, start_hour: int = 0) -> object:
        self.starts.append(start_hour)
        self.next_hours.append(start_hour + history.shape[1])
        return None


def test_quota_loop_passes_the_hour_of_week_of_column_0_to_the_forecaster() -> None:
    # regression: close_hour passed start_hour + t, but predict() adds the history length itself,
    # so the weekday/hour features of every forecast were shifted by t hours
    loop = QuotaLoop(1, 8.0, "orglinear", True, SimConfig(first_fit_h=10**6), start_hour=37)
    model = _RecordingModel()
    loop.model = model  # type: ignore[assignment]
    for _ in range(5):
        loop.sample(np.array([1.0]))
        loop.close_hour()
    # hours 2..5: the history passed is the last ``lookback`` hours, starting at 37 + t - 2, so the
    # forecast's first hour is 37 + t: the hour of week of column 0 plus the history's length
    assert model.starts == [37, 38, 39, 40]
    assert model.next_hours == [39, 40, 41, 42]


def test_gfs_queue_sorts_by_gpus_per_pod_then_pods_then_submission() -> None:
    # Sec. 3.4.2: "GPU requests, pod requests, and submission times". When the HP task frees the
    # node at 1 h, the 1-GPU x 8-pod gang goes before the 2-GPU single pod (fewer GPUs per pod),
    # although it asks for more GPUs in all
    tasks = [task("h", "hp", 8, 0, 1), task("gang", "spot", 1, 0.1, 1, pods=8), task("two", "spot", 2, 0.2, 1)]
    r = simulate(wl(tasks), make_scheduler("gfs"))
    assert r.records["gang"].jqt_s == pytest.approx(0.9 * H)
    assert r.records["two"].jqt_s == pytest.approx(1.8 * H)


@pytest.mark.parametrize("scheduler", ["gfs", "lyra"])  # the sorted drain and the heap drain
def test_queued_shapes_that_differ_only_by_gpu_model_none_are_ordered(scheduler: str) -> None:
    # "any" and "A100" 8-GPU tasks queue at the same instant behind a blocker: their order keys tie,
    # so the drain falls back on the shapes, one of whose GPU models is None
    blocker = task("blocker", "hp", 8, 0, 2)
    anyone = SimTask(TaskRequest("any", "hp", 8, 1, None, "t"), 1 * H, 1 * H)  # type: ignore[arg-type]
    a100 = SimTask(TaskRequest("a100", "hp", 8, 1, ("A100",), "t"), 1 * H, 1 * H)  # type: ignore[arg-type]
    r = simulate(wl([blocker, anyone, a100]), make_scheduler(scheduler), SimConfig(check_invariants=True))
    assert r.hp.finished == 3
    assert r.records["any"].finish_s == pytest.approx(3 * H)  # None sorts first: runs 2 h-3 h
    assert r.records["a100"].finish_s == pytest.approx(4 * H)


def test_quota_loop_fits_orglinear_once_it_has_lookback_plus_horizon_hours() -> None:
    """OrgLinear needs lookback 168 h + horizon 4 h of history: at hour 172 the loop fits it with
    the configured iteration budget (5) and forecasts from it."""
    loop = QuotaLoop(2, 8.0, "orglinear", True, SimConfig(first_fit_h=172, forecaster_maxiter=5),
                     start_hour=0)
    for h in range(172):
        assert loop.model is None
        loop.sample(np.array([2.0 + np.sin(h / 24 * 2 * np.pi), 1.0]))
        loop.close_hour()
    assert loop.model is not None and loop.fitted_at == 172
    assert (loop.model.maxiter, loop.model.train_info_["iterations"]) == (5, 5.0)
    assert loop.forecast is not None


def test_shape_key_keeps_the_gpu_models_of_a_shape() -> None:
    assert shape_key(("hp", 8.0, 1, ("A100",))) == ("hp", 8.0, 1, True, ("A100",))
    assert shape_key(("hp", 8.0, 1, None)) == ("hp", 8.0, 1, False, ())
    assert shape_key(("hp", 8.0, 1, ("A100",))) != shape_key(("hp", 8.0, 1, ("V100",)))


def test_memoised_bound_answers_the_forecasts_quantile_every_time() -> None:
    f = Forecast(np.array([[1.0, 2.0]]), np.array([[1.0, 0.5]]))
    memo = _MemoBound(f)
    z = 1.6448536269514722  # norm.ppf(0.95)
    for _ in range(2):
        np.testing.assert_allclose(memo.upper(0.95), [[1.0 + z, 2.0 + 0.5 * z]])
    np.testing.assert_array_equal(memo.mean, [[1.0, 2.0]])
    np.testing.assert_array_equal(memo.sigma, [[1.0, 0.5]])
