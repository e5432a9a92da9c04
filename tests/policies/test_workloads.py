"""Workload generators: gfs-a100 statistics vs the paper's targets, openb conversion."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from controlplane.core.errors import InvalidInput
from policies.placement import TaskRequest
from policies.sim.workloads import (
    HP_GPU_MIX,
    SEC2_RUNTIME,
    SPOT_GPU_MIX,
    GfsA100Config,
    SimTask,
    gfs_a100,
    mean_concurrent_gpus,
    offered_load,
    openb,
    sample_runtime,
    tasks_from_pods,
)


@pytest.fixture(scope="module")
def full_low() -> object:
    return gfs_a100(GfsA100Config())  # 91 days, Table 3 counts


def _stats(tasks: list) -> dict[str, np.ndarray]:
    return {"g": np.array([t.request.gpus for t in tasks]), "w": np.array([t.request.pods for t in tasks]),
            "d": np.array([t.duration_s for t in tasks]), "t": np.array([t.submit_s for t in tasks])}


@pytest.mark.slow
def test_table3_counts_mixes_and_gangs(full_low: object) -> None:
    w = full_low
    hp = [t for t in w.tasks if t.request.is_hp]
    sp = [t for t in w.tasks if not t.request.is_hp]
    assert len(hp) == 138_403 and len(sp) == 26_635  # Table 3
    assert len(w.nodes) == 287 and w.nodes.total_gpus == 2296
    for tasks, mix, gang in ((hp, HP_GPU_MIX, 0.0866), (sp, SPOT_GPU_MIX, 0.2726)):
        s = _stats(tasks)
        total = sum(mix.values())
        for g, pct in mix.items():
            assert np.mean(s["g"] == g) == pytest.approx(pct / total, abs=1e-4)
        assert np.mean(s["w"] > 1) == pytest.approx(gang, abs=1e-4)
        assert np.all(s["w"][s["g"] < 1] == 1)  # card shares are never gangs


@pytest.mark.slow
def test_runtimes_and_diurnal_peak(full_low: object) -> None:
    s = _stats([t for t in full_low.tasks if t.request.is_hp])
    assert np.percentile(s["d"], 90) == pytest.approx(6.4 * 3600, rel=0.03)  # Sec. 2
    assert np.percentile(s["d"], 99) == pytest.approx(29_308.5, rel=0.03)  # Table 5 HP JCT p99
    assert s["d"].mean() == pytest.approx(17_800, rel=0.05)  # Table 5 HP JCT
    hod = (s["t"] // 3600) % 24
    peak = np.mean((hod >= 10) & (hod < 24))
    assert peak == pytest.approx(14 * 3 / (14 * 3 + 10), abs=0.01)  # 3x intensity 10:00-24:00
    sp = _stats([t for t in full_low.tasks if not t.request.is_hp])
    assert sp["d"].mean() == pytest.approx(10_100, rel=0.05)  # Table 5 GFS low: JCT - JQT
    assert 0.5 < offered_load([t for t in full_low.tasks if t.request.is_hp], 2296) < 0.6


def test_sec2_heavy_tail_option() -> None:
    d = sample_runtime(np.random.default_rng(0), 200_000, SEC2_RUNTIME)
    assert np.percentile(d, 90) == pytest.approx(6.4 * 3600, rel=0.03)
    assert np.percentile(d, 99) == pytest.approx(19.8 * 86400, rel=0.03)


def test_load_levels_seed_and_tenant_shapes() -> None:
    small = dict(days=3.0, hp_tasks=500, spot_tasks=100)
    low = gfs_a100(GfsA100Config(**small, spot_scale=1.0))
    high = gfs_a100(GfsA100Config(**small, spot_scale=4.0))
    assert sum(not t.request.is_hp for t in high.tasks) == 4 * sum(not t.request.is_hp for t in low.tasks)
    assert high.name == "gfs-a100-high" and low.name == "gfs-a100-low"
    again = gfs_a100(GfsA100Config(**small, spot_scale=1.0))
    assert [(t.id, t.submit_s) for t in again.tasks] == [(t.id, t.submit_s) for t in low.tasks]
    shapes = np.zeros((2, 24))
    shapes[0] = 1.0
    shapes[1, :] = 9.0  # tenant b has 9x tenant a's demand
    w = gfs_a100(GfsA100Config(**small, tenants=2), shapes, ["a", "b"])
    hp = [t for t in w.tasks if t.request.is_hp]
    assert np.mean([t.request.tenant == "b" for t in hp]) == pytest.approx(0.9, abs=0.04)
    with pytest.raises(InvalidInput, match="spot_scale"):
        GfsA100Config(spot_scale=0)


def test_openb_pods_to_tasks() -> None:
    pods = SimpleNamespace(
        name=np.array(["a", "b", "c", "d", "e"]), num_gpu=np.array([1, 2, 0, 1, 1]),
        gpu_milli=np.array([500.0, 1000.0, 0.0, 1000.0, 1000.0]),
        gpu_spec=np.array(["", "V100M16|V100M32", "", "", ""]), qos=np.array(["BE", "LS", "LS", "Burstable", "BE"]),
        creation_time=np.array([100.0, 200.0, 300.0, 400.0, 500.0]),
        scheduled_time=np.array([110.0, 250.0, 300.0, np.nan, 520.0]),
        deletion_time=np.array([1110.0, 850.0, 900.0, 999.0, 530.0]))
    tasks, tenants = tasks_from_pods(pods)
    by = {t.id: t for t in tasks}
    assert set(by) == {"a", "b", "e"}  # c has no GPU, d was never scheduled
    assert by["a"].request.gpus == 0.5 and by["a"].request.priority == "spot"
    assert by["b"].request.gpu_model == ("V100M16", "V100M32") and by["b"].request.is_hp
    assert by["b"].duration_s == 600.0 and by["b"].submit_s == 100.0  # creation - first creation
    assert tenants == ("LS",)
    fast, _ = tasks_from_pods(pods, time_compression=10.0)
    assert {t.id: t.submit_s for t in fast}["e"] == pytest.approx(40.0)


@pytest.mark.slow
def test_openb_real_trace() -> None:
    from clusters.data.catalog import DataCatalog
    from controlplane.core.config import data_dir

    cat = DataCatalog(data_dir())
    full = openb(cat.openb_nodes(), cat.openb_pods(), target_load=None)
    assert len(full.tasks) == 6203 and full.nodes.total_gpus == 6212
    w = openb(cat.openb_nodes(), cat.openb_pods(), target_load=0.8)
    demand = mean_concurrent_gpus(w.tasks)
    assert 0.7 < demand / w.nodes.total_gpus <= 0.8 + 1e-9 or w.nodes.total_gpus - 8 < demand / 0.8
    assert set(w.tenants) <= {"LS", "Burstable", "Guaranteed"}


def test_openb_node_count_keeps_the_largest_nodes_in_list_order() -> None:
    from policies.sim.workloads import openb

    nodes = SimpleNamespace(name=np.array(["a", "b", "c", "d"]),
                            gpu_model=np.array(["G2", "V100", "G3", "G2"]), gpus=np.array([2, 8, 4, 8]))
    pods = SimpleNamespace(
        name=np.array(["p"]), num_gpu=np.array([1]), gpu_milli=np.array([1000.0]), gpu_spec=np.array([""]),
        qos=np.array(["LS"]), creation_time=np.array([0.0]), scheduled_time=np.array([10.0]),
        deletion_time=np.array([100.0]))
    w = openb(nodes, pods, node_count=3)
    assert list(w.nodes.names) == ["b", "c", "d"] and w.nodes.gpus.sum() == 20
    with pytest.raises(InvalidInput, match="node_count"):
        openb(nodes, pods, node_count=5)
    every = openb(nodes, pods, node_count=4)  # all four nodes is a valid count
    assert sorted(every.nodes.names) == ["a", "b", "c", "d"] and every.nodes.gpus.sum() == 22


def test_mean_concurrent_gpus_is_the_work_over_the_window_from_first_arrival_to_last_finish() -> None:
    """A 2 x 2-GPU gang for 500 s from t = 1000 s and half a card for 800 s from t = 1200 s:
    (4 x 500 + 0.5 x 800) GPU-s over the 1000 s from 1000 s to 2000 s = 2.4 GPUs."""
    tasks = [SimTask(TaskRequest("a", "hp", 2.0, pods=2), 1000.0, 500.0),
             SimTask(TaskRequest("b", "spot", 0.5), 1200.0, 800.0)]
    assert mean_concurrent_gpus(tasks) == 2.4
    assert mean_concurrent_gpus([]) == 0.0
