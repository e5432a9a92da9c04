"""The GPU cluster simulator's workloads and schedulers by name, checked: what the scheduler
benchmark (``benchmarks.scheduler``) and its robustness run (``benchmarks.robust``) both run."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from clusters.data.catalog import DataCatalog
from clusters.data.openb import PodList, load_openb_pods
from controlplane.core.config import data_dir
from controlplane.core.errors import BadDataFile, InvalidInput
from policies.gfs_options import LIVE_DEFAULT
from policies.placement import FrameworkScheduler, QueueRule
from policies.schedulers import make_scheduler
from policies.sim.gpu_sim import SimResult
from policies.sim.workloads import LOAD_LEVELS, GfsA100Config, Workload, gfs_a100, openb

WORKLOADS = ("gfs-a100-low", "gfs-a100-medium", "gfs-a100-high", "openb")
#: ``why`` mode's control: GFS with YARN-CS's strict FCFS queue (not a scheduler of the paper).
STRICT_CONTROL = "gfs/strict-fcfs"
QUOTA = "+quota"


def build_workload(name: str, days: float | None = None, pods_file: str | None = None, seed: int = 2,
                   nodes: int | None = None, hp_peak: float = 1.0,
                   gang_widths: tuple[int, ...] | None = None) -> Workload:
    """gfs-a100-{low,medium,high} (tenant shapes from alibaba-dlrm) or openb (or ``--pods``)."""
    cat = DataCatalog(data_dir())
    if name == "openb" or pods_file:
        pods = _pod_list(pods_file) if pods_file else cat.openb_pods("default")
        w = openb(cat.openb_nodes(), pods, node_count=nodes)
        if days is not None:
            w = Workload(w.name, w.nodes, [t for t in w.tasks if t.submit_s < days * 86400], w.tenants,
                         w.start_hour, w.info)
        if not w.tasks:
            source = f"--pods {pods_file}" if pods_file else "openb_pod_list_default.csv"
            raise InvalidInput(source, f"no pod with GPUs and a known run time{' in the first --days' if days else ''}"
                               ", so there is nothing to replay",
                               fix="use openb_pod_list_default.csv or gpushare40.csv, or more --days")
        return w
    level = name.removeprefix("gfs-a100-")
    if not name.startswith("gfs-a100-") or level not in LOAD_LEVELS:
        raise InvalidInput("workload", f"unknown workload {name!r}", fix=f"use one of {', '.join(WORKLOADS)}")
    demand = cat.dlrm_demand()
    base = GfsA100Config()
    d = base.days if days is None else days
    frac = d / base.days
    top = np.argsort(-demand.gpus.mean(axis=1), kind="stable")[: base.tenants]
    widths = tuple((w, 1.0) for w in gang_widths) if gang_widths else base.gang_widths
    cfg = GfsA100Config(days=d, hp_tasks=int(round(base.hp_tasks * frac)),
                        spot_tasks=int(round(base.spot_tasks * frac)), spot_scale=LOAD_LEVELS[level],
                        nodes=nodes or base.nodes, seed=seed, hp_peak_scale=hp_peak, gang_widths=widths)
    return gfs_a100(cfg, demand.gpus[top], [demand.tenants[i] for i in top])


def _pod_list(path: str) -> PodList:
    """The ``--pods`` file, its errors naming the flag."""
    try:
        return load_openb_pods(path)
    except BadDataFile as exc:
        raise exc.given_as("--pods") from None


def scheduler_for(label: str, seed: int, gfs_queue: str = LIVE_DEFAULT.queue,
                  spot_score: str = LIVE_DEFAULT.spot_score, hp_score: str = LIVE_DEFAULT.hp_score,
                  preempt_reach: str = LIVE_DEFAULT.preempt_reach) -> FrameworkScheduler:
    """``NAME``, ``NAME+quota`` or :data:`STRICT_CONTROL` (GFS with YARN-CS's strict FCFS queue)."""
    if label == STRICT_CONTROL:
        return replace(make_scheduler("gfs", seed=seed), queue=QueueRule("fcfs", strict=True))
    return make_scheduler(label.removesuffix(QUOTA), seed=seed, quota=label.endswith(QUOTA), gfs_queue=gfs_queue,
                          spot_score=spot_score, hp_score=hp_score, preempt_reach=preempt_reach)


def check_did_work(workload: str, scheduler: str, w: Workload, r: SimResult) -> None:
    """Refuse a run in which no task finished: its figures would be zeros, not a result."""
    if r.hp.finished + r.spot.finished == 0:
        raise InvalidInput("workload", f"{workload}: none of {len(w.tasks)} tasks finished under {scheduler}, "
                           "so every figure would be a meaningless zero",
                           fix="simulate more --days, or more --nodes than the largest task needs")
