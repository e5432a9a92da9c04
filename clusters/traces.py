"""Load every public dataset spotplane uses into typed objects of numpy arrays.

The data directory holds the normalised format described in ``shared/data/README.md`` (and
written by ``spotplane data fetch``). One convention everywhere: ``available[i]`` is the number
of the ``nodes`` requested instances available during tick ``i``, which lasts ``gap_seconds``.

``DataCatalog(data_dir)`` is the one entry point: it lists what is present and loads each kind.
A missing dataset raises :class:`~controlplane.errors.DataNotFound` naming the file, the
directory searched and the command that fetches it.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path

import numpy as np
import numpy.typing as npt

from controlplane.errors import DataCorrupt, DataNotFound

HOUR = 3600.0

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
StrArray = npt.NDArray[np.str_]

# Relative paths of the datasets (what `spotplane data list` checks and `data fetch` writes).
DATASETS: dict[str, str] = {
    "spot-traces": "spot-traces",
    "multiregion-h100": "multiregion-h100",
    "gce-preemptions": "gce-preemptions/lifetimes.csv",
    "alibaba-spot-gpu": "alibaba-spot-gpu/node_info_df.csv",
    "alibaba-openb": "alibaba-openb/openb_node_list_gpu_node.csv",
    "alibaba-dlrm": "alibaba-dlrm/disaggregated_DLRM_trace.csv",
}


# --------------------------------------------------------------------------------------------
# Spot availability / preemption traces (spot-traces/, multiregion-h100/)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class SpotTrace:
    """One zone's spot trace: how many of ``nodes`` instances were available in each tick."""

    name: str
    kind: str  # "availability" | "preemption"
    cloud: str
    zone: str
    instance_type: str
    accelerator: str
    accelerator_count: int
    nodes: int
    collected: str
    gap_seconds: float
    available: IntArray
    region: str = ""
    start_time: datetime | None = None
    spot_price_per_hour: float | None = None
    on_demand_price_per_hour: float | None = None
    path: Path | None = None

    @property
    def n_ticks(self) -> int:
        return int(self.available.shape[0])

    @property
    def gap_hours(self) -> float:
        return self.gap_seconds / HOUR

    @property
    def hours(self) -> float:
        """Length of the trace in hours."""
        return self.n_ticks * self.gap_hours

    @property
    def availability_fraction(self) -> float:
        """Mean fraction of the requested instances that were available."""
        return float(self.available.mean() / self.nodes) if self.n_ticks else 0.0

    def spot_up(self, needed: int | None = None) -> BoolArray:
        """Ticks in which at least ``needed`` (default: all ``nodes``) instances were available."""
        return self.available >= (self.nodes if needed is None else needed)

    def window(self, start_tick: int, n_ticks: int) -> IntArray:
        """``available[start_tick : start_tick + n_ticks]``, refusing windows past the end."""
        if start_tick < 0 or n_ticks < 0 or start_tick + n_ticks > self.n_ticks:
            from controlplane.errors import InvalidInput

            raise InvalidInput(
                "start_tick",
                f"window [{start_tick}, {start_tick + n_ticks}) is outside the trace "
                f"{self.name} of {self.n_ticks} ticks",
                fix=f"choose start_tick <= {max(self.n_ticks - n_ticks, 0)}",
            )
        return self.available[start_tick : start_tick + n_ticks]


def load_spot_trace(path: str | Path) -> SpotTrace:
    """Read one normalised trace file (JSON)."""
    p = Path(path)
    if not p.is_file():
        raise DataNotFound(f"spot trace {p.name}", str(p.parent))
    try:
        raw = json.loads(p.read_text())
        available = np.asarray(raw["available"], dtype=np.int64)
        nodes = int(raw.get("nodes", 1))
        start = raw.get("start_time")
        trace = SpotTrace(
            name=str(raw["name"]),
            kind=str(raw.get("kind", "availability")),
            cloud=str(raw["cloud"]),
            zone=str(raw["zone"]),
            instance_type=str(raw["instance_type"]),
            accelerator=str(raw.get("accelerator") or ""),
            accelerator_count=int(raw.get("accelerator_count", 1)),
            nodes=nodes,
            collected=str(raw.get("collected", "")),
            gap_seconds=float(raw["gap_seconds"]),
            available=available,
            region=str(raw.get("region", "") or raw["zone"].rsplit("-", 1)[0]),
            start_time=datetime.fromisoformat(start) if start else None,
            spot_price_per_hour=_opt_float(raw.get("spot_price_per_hour")),
            on_demand_price_per_hour=_opt_float(raw.get("on_demand_price_per_hour")),
            path=p,
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise DataCorrupt(f"{p}: not a normalised spot trace ({exc})", fix="re-run `spotplane data fetch`") from exc
    if available.ndim != 1 or (available.size and (available.min() < 0 or available.max() > nodes)):
        raise DataCorrupt(f"{p}: 'available' must be a list of counts in 0..{nodes}")
    return trace


def _opt_float(v: object) -> float | None:
    return None if v is None else float(v)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Google preemptible VM lifetimes (gce-preemptions/)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class GceLifetimes:
    """1,442 preemptible VMs: lifetime in hours and whether a preemption ended it.

    ``preempted[i]`` False means the user stopped the VM first: a right-censored lifetime.
    """

    vm: StrArray
    zone: StrArray
    machine_type: StrArray
    launched_at: StrArray
    lifetime_hours: FloatArray
    preempted: BoolArray
    day_of_week: StrArray
    hour_of_day: IntArray
    workload: StrArray

    def __len__(self) -> int:
        return int(self.lifetime_hours.shape[0])

    @property
    def n_preempted(self) -> int:
        return int(self.preempted.sum())

    def subset(self, mask: BoolArray) -> GceLifetimes:
        """The VMs where ``mask`` is True."""
        return GceLifetimes(**{f: getattr(self, f)[mask] for f in self.__dataclass_fields__})

    def where(self, *, machine_type: str | None = None, zone: str | None = None) -> GceLifetimes:
        mask = np.ones(len(self), dtype=bool)
        if machine_type is not None:
            mask &= self.machine_type == machine_type
        if zone is not None:
            mask &= self.zone == zone
        return self.subset(mask)

    def daytime(self, start_hour: int = 8, end_hour: int = 20) -> BoolArray:
        """Mask of VMs launched in local daytime, ``start_hour <= hour < end_hour``."""
        return (self.hour_of_day >= start_hour) & (self.hour_of_day < end_hour)

    def groups(self, min_size: int = 40) -> Iterator[tuple[str, str, GceLifetimes]]:
        """(machine_type, zone, VMs) for every group with at least ``min_size`` VMs."""
        pairs = sorted(set(zip(self.machine_type.tolist(), self.zone.tolist(), strict=True)))
        for mt, zone in pairs:
            g = self.where(machine_type=mt, zone=zone)
            if len(g) >= min_size:
                yield mt, zone, g


def load_gce_lifetimes(path: str | Path) -> GceLifetimes:
    """Read ``lifetimes.csv``."""
    p = Path(path)
    rows = _read_csv(p, "Google preemption lifetimes (gce-preemptions/lifetimes.csv)")
    outcome = np.array([r["outcome"] for r in rows])
    bad = set(outcome.tolist()) - {"preempted", "stopped"}
    if bad:
        raise DataCorrupt(f"{p}: unknown outcome values {sorted(bad)}; expected preempted or stopped")
    return GceLifetimes(
        vm=np.array([r["vm"] for r in rows]),
        zone=np.array([r["zone"] for r in rows]),
        machine_type=np.array([r["machine_type"] for r in rows]),
        launched_at=np.array([r["launched_at"] for r in rows]),
        lifetime_hours=np.array([float(r["lifetime_seconds"]) for r in rows]) / HOUR,
        preempted=outcome == "preempted",
        day_of_week=np.array([r["day_of_week"] for r in rows]),
        hour_of_day=np.array([int(r["hour_of_day"]) for r in rows], dtype=np.int64),
        workload=np.array([r["workload"] for r in rows]),
    )


# --------------------------------------------------------------------------------------------
# Alibaba GPU clusters
# --------------------------------------------------------------------------------------------
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


def load_openb_nodes(path: str | Path) -> NodeList:
    rows = _read_csv(Path(path), "openb node list (alibaba-openb/openb_node_list_gpu_node.csv)")
    return NodeList(
        name=np.array([r["sn"] for r in rows]),
        gpu_model=np.array([r["model"] for r in rows]),
        gpus=np.array([int(r["gpu"]) for r in rows], dtype=np.int64),
        cpus=np.array([float(r["cpu_milli"]) / 1000.0 for r in rows]),
        memory_mib=np.array([float(r["memory_mib"]) for r in rows]),
    )


def load_openb_pods(path: str | Path) -> PodList:
    rows = _read_csv(Path(path), f"openb pod list ({Path(path).name})")

    def col(name: str, default: str = "") -> list[str]:
        return [r.get(name, default) or default for r in rows]

    def num(name: str, default: float = math.nan) -> FloatArray:
        return np.array([float(v) if v not in ("", None) else default for v in col(name)])

    return PodList(
        name=np.array(col("name")),
        cpu_milli=num("cpu_milli", 0.0),
        memory_mib=num("memory_mib", 0.0),
        num_gpu=num("num_gpu", 0.0).astype(np.int64),
        gpu_milli=num("gpu_milli", 0.0),
        gpu_spec=np.array(col("gpu_spec")),
        qos=np.array(col("qos", "LS")),
        pod_phase=np.array(col("pod_phase", "Running")),
        creation_time=num("creation_time", 0.0),
        deletion_time=num("deletion_time"),
        scheduled_time=num("scheduled_time"),
    )


def load_spot_gpu_nodes(path: str | Path) -> NodeList:
    rows = _read_csv(Path(path), "GFS cluster nodes (alibaba-spot-gpu/node_info_df.csv)")
    return NodeList(
        name=np.array([r["node_name"] for r in rows]),
        gpu_model=np.array([r["gpu_model"] for r in rows]),
        gpus=np.array([int(r["gpu_capacity_num"]) for r in rows], dtype=np.int64),
        cpus=np.array([float(r["cpu_num"]) for r in rows]),
        memory_mib=np.zeros(len(rows)),
    )


@dataclass(frozen=True, eq=False)
class TenantDemand:
    """Hourly GPU demand per tenant: ``gpus[tenant, hour]`` = mean GPUs requested in that hour."""

    tenants: list[str]
    gpus: FloatArray
    hours: int

    def __len__(self) -> int:
        return len(self.tenants)

    def of(self, tenant: str) -> FloatArray:
        return self.gpus[self.tenants.index(tenant)]


DLRM_HOURS = 744


def load_dlrm_demand(path: str | Path, hours: int = DLRM_HOURS) -> TenantDemand:
    """Sum ``gpu_request`` of every instance alive in each hour, per ``app_name`` (one tenant each).

    An instance is alive from ``scheduled_time`` (else ``creation_time``; NaN = before the trace
    start) to ``deletion_time`` (NaN = after the trace end); a partial hour counts pro rata.
    """
    rows = _read_csv(Path(path), "Alibaba DLRM trace (alibaba-dlrm/disaggregated_DLRM_trace.csv)")
    apps = sorted({r["app_name"] for r in rows}, key=_natural_key)
    index = {a: i for i, a in enumerate(apps)}
    gpus = np.zeros((len(apps), hours))
    edges = np.arange(hours + 1) * HOUR
    for r in rows:
        start = _first_number(r.get("scheduled_time"), r.get("creation_time"), default=0.0)
        end = _first_number(r.get("deletion_time"), default=hours * HOUR)
        g = float(r["gpu_request"] or 0.0)
        if g <= 0 or end <= start:
            continue
        overlap = np.clip(np.minimum(edges[1:], end) - np.maximum(edges[:-1], start), 0.0, HOUR)
        gpus[index[r["app_name"]]] += g * overlap / HOUR
    return TenantDemand(tenants=apps, gpus=gpus, hours=hours)


def _first_number(*values: str | None, default: float) -> float:
    for v in values:
        if v not in (None, "") and not math.isnan(float(v)):  # type: ignore[arg-type]
            return float(v)  # type: ignore[arg-type]
    return default


def _natural_key(s: str) -> tuple[str, int]:
    head, _, tail = s.rpartition("_")
    return (head, int(tail)) if tail.isdigit() else (s, -1)


def _read_csv(path: Path, what: str) -> list[dict[str, str]]:
    if not path.is_file():
        raise DataNotFound(what, str(path.parent))
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


# --------------------------------------------------------------------------------------------
# The catalog: what is present, and typed access to each kind
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DatasetInfo:
    """One line of ``spotplane data list``."""

    name: str
    path: Path
    present: bool
    files: int = 0
    summary: str = ""


@dataclass
class DataCatalog:
    """Typed access to everything in one data directory."""

    root: Path
    _cache: dict[str, object] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root)

    def path(self, dataset: str) -> Path:
        return self.root / DATASETS[dataset]

    def require(self, dataset: str) -> Path:
        """The dataset's path, or DataNotFound naming the file, the directory and the fix."""
        p = self.path(dataset)
        if not p.exists():
            raise DataNotFound(f"dataset {dataset!r} ({DATASETS[dataset]})", str(self.root))
        return p

    # -- spot traces -------------------------------------------------------------------------
    def spot_trace_files(self, collection: str = "") -> list[Path]:
        """Trace files under ``spot-traces/<collection>``, e.g. ``availability/1-node/aws-10-26-2022``."""
        base = self.require("spot-traces") / collection
        if not base.exists():
            raise DataNotFound(f"spot-traces/{collection}", str(self.root))
        return sorted(base.rglob("*.json")) if base.is_dir() else [base]

    def spot_traces(self, collection: str = "") -> list[SpotTrace]:
        return [self._load(f, load_spot_trace) for f in self.spot_trace_files(collection)]

    def h100_zones(self) -> list[SpotTrace]:
        """The 13 aligned GCP H100 zones with their spot and on-demand prices."""
        return [self._load(f, load_spot_trace) for f in sorted(self.require("multiregion-h100").glob("*.json"))]

    # -- tables ------------------------------------------------------------------------------
    def gce_lifetimes(self) -> GceLifetimes:
        return self._load(self.require("gce-preemptions"), load_gce_lifetimes)

    def spot_gpu_nodes(self) -> NodeList:
        return self._load(self.require("alibaba-spot-gpu"), load_spot_gpu_nodes)

    def openb_nodes(self) -> NodeList:
        return self._load(self.require("alibaba-openb"), load_openb_nodes)

    def openb_pods(self, variant: str = "default") -> PodList:
        p = self.require("alibaba-openb").parent / f"openb_pod_list_{variant}.csv"
        return self._load(p, load_openb_pods)

    def dlrm_demand(self) -> TenantDemand:
        return self._load(self.require("alibaba-dlrm"), load_dlrm_demand)

    # -- listing -----------------------------------------------------------------------------
    def datasets(self) -> list[DatasetInfo]:
        return [self._info(name) for name in DATASETS]

    def _info(self, name: str) -> DatasetInfo:
        p = self.path(name)
        if not p.exists():
            return DatasetInfo(name, p, False)
        if name == "spot-traces":
            return DatasetInfo(name, p, True, len(self.spot_trace_files()), f"{len(self.spot_traces())} traces")
        if name == "multiregion-h100":
            zones = self.h100_zones()
            return DatasetInfo(name, p, True, len(zones), f"{len(zones)} zones")
        summary = {
            "gce-preemptions": lambda: f"{len(self.gce_lifetimes())} VMs, {self.gce_lifetimes().n_preempted} preempted",
            "alibaba-spot-gpu": lambda: f"{len(self.spot_gpu_nodes())} nodes, {self.spot_gpu_nodes().total_gpus} GPUs",
            "alibaba-openb": lambda: f"{len(self.openb_nodes())} nodes, {len(self.openb_pods())} pods",
            "alibaba-dlrm": lambda: f"{len(self.dlrm_demand())} tenants x {self.dlrm_demand().hours} h",
        }[name]()
        files = len(list(p.parent.glob("*.csv")))
        return DatasetInfo(name, p, True, files, summary)

    def _load(self, path: Path, loader):  # type: ignore[no-untyped-def]
        key = str(path)
        if key not in self._cache:
            self._cache[key] = loader(path)
        return self._cache[key]

    @cached_property
    def all_spot_traces(self) -> list[SpotTrace]:
        """Every spot trace and H100 zone (what `data list` tabulates)."""
        return self.spot_traces() + self.h100_zones()
