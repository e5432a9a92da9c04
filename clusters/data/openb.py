"""A production GPU cluster's nodes and pods (alibaba-openb, alibaba-spot-gpu), for the GPU cluster simulator."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from clusters.data.table import LINE, BoolArray, Col, FloatArray, IntArray, StrArray, read_table
from controlplane.core.errors import BadDataFile


@dataclass(frozen=True, eq=False)
class NodeList:
    """GPU nodes of a cluster: name, GPU model, GPUs per node, CPU (cores), memory (MiB, 0 if unknown)."""

    name: StrArray
    gpu_model: StrArray
    gpus: IntArray
    cpus: FloatArray
    memory_mib: FloatArray

    def __len__(self) -> int:
        return int(self.name.shape[0])

    @property
    def total_gpus(self) -> int:
        return int(self.gpus.sum())


@dataclass(frozen=True, eq=False)
class PodList:
    """Pods of the openb trace. Times are seconds from the trace start; ``gpu_milli`` per GPU."""

    name: StrArray
    cpu_milli: FloatArray
    memory_mib: FloatArray
    num_gpu: IntArray
    gpu_milli: FloatArray
    gpu_spec: StrArray  # "" = any model, else models separated by "|"
    qos: StrArray  # LS | Guaranteed | Burstable (high priority) | BE (spot)
    pod_phase: StrArray
    creation_time: FloatArray
    deletion_time: FloatArray
    scheduled_time: FloatArray  # NaN when never scheduled

    def __len__(self) -> int:
        return int(self.name.shape[0])

    @property
    def high_priority(self) -> BoolArray:
        return self.qos != "BE"

    @property
    def duration_seconds(self) -> FloatArray:
        """deletion - scheduled time (NaN for pods never scheduled)."""
        return self.deletion_time - self.scheduled_time


OPENB_NODE_COLUMNS = (
    Col("sn", unique=True), Col("cpu_milli", "float", low=0.0), Col("memory_mib", "float", low=0.0),
    Col("gpu", "int", low=0), Col("model"),
)


def load_openb_nodes(path: str | Path) -> NodeList:
    """Read an openb node list (see :data:`OPENB_NODE_COLUMNS`)."""
    t = read_table(Path(path), "openb node list (alibaba-openb/openb_node_list_gpu_node.csv)", OPENB_NODE_COLUMNS)
    return NodeList(name=t["sn"], gpu_model=t["model"], gpus=t["gpu"], cpus=t["cpu_milli"] / 1000.0,
                    memory_mib=t["memory_mib"])


QOS_CLASSES = ("LS", "Guaranteed", "Burstable", "BE")


SNAPSHOT_FIX = ("this pod list is a static snapshot and cannot be replayed; "
                "use openb_pod_list_default.csv or gpushare40.csv")


OPENB_POD_COLUMNS = (
    Col("name", unique=True), Col("num_gpu", "int", low=0), Col("gpu_milli", "float", low=0.0, high=1000.0),
    Col("qos", choices=QOS_CLASSES),
    Col("creation_time", "float", low=0.0, missing_fix=SNAPSHOT_FIX),
    Col("deletion_time", "float", low=0.0, blank=True, missing_fix=SNAPSHOT_FIX),
    Col("scheduled_time", "float", low=0.0, blank=True, missing_fix=SNAPSHOT_FIX),
    Col("cpu_milli", "float", low=0.0, required=False, default="0"),
    Col("memory_mib", "float", low=0.0, required=False, default="0"),
    Col("gpu_spec", blank=True, required=False), Col("pod_phase", blank=True, required=False, default="Running"),
)


#: A static snapshot (``openb_pod_list_multigpu20.csv``): no times, no QoS (read as blank).
OPENB_SNAPSHOT_COLUMNS = tuple(
    replace(c, required=False, blank=True, default="") if c.name in ("qos", "creation_time", "deletion_time",
                                                                     "scheduled_time") else c
    for c in OPENB_POD_COLUMNS
)


def load_openb_pods(path: str | Path, *, replay: bool = True) -> PodList:
    """Read an openb pod list that can be replayed (see :data:`OPENB_POD_COLUMNS`).

    Times are seconds >= 0; a blank ``scheduled_time`` is a pod never scheduled, a blank
    ``deletion_time`` one still running at the end; a pod is scheduled no earlier than created
    and deleted no earlier than scheduled. Rows need not be sorted by time. ``replay=False``
    reads a static snapshot too (:data:`OPENB_SNAPSHOT_COLUMNS`: absent times are NaN).
    """
    p = Path(path)
    t = read_table(p, f"openb pod list ({p.name})", OPENB_POD_COLUMNS if replay else OPENB_SNAPSHOT_COLUMNS)
    in_order(p, t, "creation_time", "scheduled_time")
    in_order(p, t, "scheduled_time", "deletion_time")
    in_order(p, t, "creation_time", "deletion_time")
    return PodList(
        name=t["name"],
        cpu_milli=t["cpu_milli"],
        memory_mib=t["memory_mib"],
        num_gpu=t["num_gpu"],
        gpu_milli=t["gpu_milli"],
        gpu_spec=t["gpu_spec"],
        qos=t["qos"],
        pod_phase=t["pod_phase"],
        creation_time=t["creation_time"],
        deletion_time=t["deletion_time"],
        scheduled_time=t["scheduled_time"],
    )


def in_order(path: Path, t: dict[str, np.ndarray], first: str, then: str) -> None:
    """Refuse the first row whose ``then`` time (when known) is before its ``first`` time."""
    with np.errstate(invalid="ignore"):
        wrong = np.flatnonzero(t[then] < t[first])
    if wrong.size:
        i = int(wrong[0])
        raise BadDataFile(path, f"{then} {t[then][i]:g} is before {first} {t[first][i]:g}",
                          line=int(t[LINE][i]), column=then, fix=f"{then} must be >= {first} (or blank)")


SPOT_GPU_NODE_COLUMNS = (
    Col("node_name", unique=True), Col("gpu_model"), Col("gpu_capacity_num", "int", low=0),
    Col("cpu_num", "float", low=0.0),
)


def load_spot_gpu_nodes(path: str | Path) -> NodeList:
    """Read the GFS cluster's node table (see :data:`SPOT_GPU_NODE_COLUMNS`)."""
    t = read_table(Path(path), "GFS cluster nodes (alibaba-spot-gpu/node_info_df.csv)", SPOT_GPU_NODE_COLUMNS)
    return NodeList(name=t["node_name"], gpu_model=t["gpu_model"], gpus=t["gpu_capacity_num"], cpus=t["cpu_num"],
                    memory_mib=np.zeros(len(t["node_name"])))
