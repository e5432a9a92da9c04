"""GPU cluster simulator on generated pod lists: every scheduler finishes, no card is double-booked
and every task that fits the cluster finishes exactly once (GPU models absent or mixed, card
shares, gangs, equal submission times, GPU models no node has)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.placement import TaskRequest
from policies.schedulers import SCHEDULERS, make_scheduler
from policies.sim.gpu_sim import GpuSimulator, SimConfig
from policies.sim.workloads import NodeSpec, SimTask, Workload

MODELS = ("A100", "V100", "T4")  # T4: a model no generated node has (an empty pool)
H = 3600.0

nodes_st = st.lists(st.tuples(st.sampled_from(MODELS[:2]), st.sampled_from((1, 2, 4, 8))), min_size=1, max_size=4)
model_st = st.one_of(st.none(), st.lists(st.sampled_from(MODELS), min_size=1, max_size=3, unique=True).map(tuple))


@st.composite
def task_st(draw: st.DrawFn, i: int) -> SimTask:
    g = draw(st.sampled_from((0.25, 0.5, 1.0, 2.0, 4.0, 8.0)))
    pods = draw(st.integers(1, 3)) if g >= 1 else 1
    req = TaskRequest(f"t{i:03d}", draw(st.sampled_from(("hp", "spot"))), g, pods, draw(model_st),
                      draw(st.sampled_from(("a", "b", "unknown"))))
    submit = draw(st.sampled_from((0.0, 0.0, 600.0, 3600.0))) + draw(st.integers(0, 40)) * 1800.0
    return SimTask(req, submit, draw(st.floats(60.0, 6 * H)))


@st.composite
def workload_st(draw: st.DrawFn) -> Workload:
    spec = draw(nodes_st)
    n = draw(st.integers(0, 14))
    tasks = sorted((draw(task_st(i)) for i in range(n)), key=lambda t: (t.submit_s, t.id))
    nodes = NodeSpec(np.array([f"n{i}" for i in range(len(spec))]), np.array([m for m, _ in spec]),
                     np.array([g for _, g in spec], dtype=np.int64))
    return Workload("gen", nodes, tasks, ("a", "b"))


# a spot task the quota never lets in would keep the run going forever: stop after 30 days
MAX_SIM_S = 30 * 24 * H
CFG = SimConfig(check_invariants=True, first_fit_h=4, last_week_peak_min_h=1, forecaster_maxiter=5,
                max_sim_s=MAX_SIM_S)


@pytest.mark.parametrize("name", SCHEDULERS)
@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(w=workload_st(), seed=st.integers(0, 3))
def test_every_scheduler_finishes_every_fitting_task_exactly_once(name: str, w: Workload, seed: int) -> None:
    sim = GpuSimulator(w, make_scheduler(name, seed=seed), CFG)
    r = sim.run()  # check_invariants: a double-booked or leaked card raises inside the run
    left_out = set(sim.unschedulable)
    for t in w.tasks:
        if t.id in left_out:
            assert t.id not in r.records
            continue
        rec = r.records[t.id]
        if rec.finished == 0 and t.request.priority == "spot":
            continue  # starved by the quota until the run's end (an HP task never is)
        assert rec.finished == 1, f"{t.id} finished {rec.finished} times under {name}"
        assert rec.finish_s >= t.submit_s + t.duration_s - 1e-6
        assert rec.jqt_s >= -1e-9 and rec.runs == rec.evictions + 1
    starved = sum(1 for t in w.tasks if t.id not in left_out and r.records[t.id].finished == 0)
    assert r.hp.finished + r.spot.finished == len(w.tasks) - len(left_out) - starved
    if not starved:
        assert not sim.running and float(sim.free.sum()) == pytest.approx(sim.total)
