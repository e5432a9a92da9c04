"""Load every public dataset spotplane uses into typed objects of numpy arrays.

The data directory holds the normalised format described in ``shared/data/README.md`` (and
written by ``spotplane data fetch``). One convention everywhere: ``available[i]`` is the number
of the ``nodes`` requested instances available during tick ``i``, which lasts ``gap_seconds``.

``DataCatalog(data_dir)`` is the one entry point: it lists what is present and loads each kind.
A missing dataset raises :class:`~controlplane.core.errors.DataNotFound` naming the file, the
directory searched and the command that fetches it. Every loader checks each field or cell it
reads (one validating function per format: :func:`read_table` with the format's columns for CSV,
:func:`load_spot_trace` for JSON) and refuses what it cannot use with
:class:`~controlplane.core.errors.BadDataFile` naming the file, the line or column, and the fix.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property
from pathlib import Path

import numpy as np
import numpy.typing as npt

from clusters.data_manifest import SHA256
from controlplane.core.errors import BadDataFile, DataCorrupt, DataNotFound, InvalidInput
from controlplane.core.units import HOUR

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
            raise InvalidInput(
                "start_tick",
                f"window [{start_tick}, {start_tick + n_ticks}) is outside the trace "
                f"{self.name} of {self.n_ticks} ticks",
                fix=f"choose start_tick <= {max(self.n_ticks - n_ticks, 0)}",
            )
        return self.available[start_tick : start_tick + n_ticks]


FieldError = Callable[[str, str], BadDataFile]  # (field, message) -> the error naming the file
TRACE_FIX = "re-run `spotplane data fetch`, or see the spot trace format in shared/data/README.md"


def load_spot_trace(path: str | Path) -> SpotTrace:
    """Read one normalised trace file (JSON), refusing any field it cannot use."""
    p = Path(path)
    if not p.is_file():
        raise DataNotFound(f"spot trace {p.name}", str(p.parent))
    raw = _read_json_object(p)

    def bad(key: str, message: str) -> BadDataFile:
        return BadDataFile(p, message, column=key, fix=TRACE_FIX)

    def text(key: str, default: str | None = None) -> str:
        v = raw.get(key, default)
        if v is None and default is None:
            raise bad(key, "missing")
        if not isinstance(v, str) or (default is None and not v):
            raise bad(key, f"must be a non-empty string, got {v!r}")
        return v

    def number(key: str, default: float | None = None, *, low: float = 0.0, whole: bool = False) -> float:
        v = raw.get(key, default)
        if v is None:
            raise bad(key, "missing")
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < low or (
                whole and v != int(v)):
            kind = "a whole number" if whole else "a finite number"
            raise bad(key, f"must be {kind} >= {low:g}, got {v!r}")
        return float(v)

    nodes = int(number("nodes", 1, low=1, whole=True))
    gap = number("gap_seconds")
    if gap <= 0:
        raise bad("gap_seconds", f"must be > 0, got {gap:g}")
    available = _trace_counts(raw.get("available"), nodes, bad)
    start = raw.get("start_time")
    try:
        start_time = datetime.fromisoformat(start) if isinstance(start, str) and start else None
        if start not in (None, "") and start_time is None:
            raise TypeError(start)
    except (TypeError, ValueError) as exc:
        raise bad("start_time", f"not an ISO 8601 time ({start!r})") from exc
    zone = text("zone")
    return SpotTrace(
        name=text("name"),
        kind=_choice(raw, "kind", ("availability", "preemption"), bad),
        cloud=text("cloud"),
        zone=zone,
        instance_type=text("instance_type"),
        accelerator=str(raw.get("accelerator") or ""),
        accelerator_count=int(number("accelerator_count", 1, whole=True)),
        nodes=nodes,
        collected=text("collected", ""),
        gap_seconds=gap,
        available=available,
        region=str(raw.get("region", "") or zone.rsplit("-", 1)[0]),
        start_time=start_time,
        spot_price_per_hour=None if raw.get("spot_price_per_hour") is None else number("spot_price_per_hour"),
        on_demand_price_per_hour=(None if raw.get("on_demand_price_per_hour") is None
                                  else number("on_demand_price_per_hour")),
        path=p,
    )


def check_aligned_zones(root: Path, zones: list[SpotTrace]) -> list[SpotTrace]:
    """Zones one simulation steps together: priced, and on one clock (same gap, length, start)."""
    if not zones:
        raise BadDataFile(root, "no zone files (*.json)", fix="re-run `spotplane data fetch --only multiregion-h100`")
    first = zones[0]
    for z in zones:
        for key in ("spot_price_per_hour", "on_demand_price_per_hour"):
            if getattr(z, key) is None:
                raise BadDataFile(z.path, "missing; a zone needs its prices", column=key, fix=TRACE_FIX)
        for key in ("gap_seconds", "n_ticks", "start_time"):
            if getattr(z, key) != getattr(first, key):
                raise BadDataFile(z.path, f"{getattr(z, key)} differs from {getattr(first, key)} in "
                                  f"{first.path.name if first.path else first.name}", column="available" if key == "n_ticks" else key,
                                  fix="every zone must be on one clock: same gap_seconds, ticks and start_time")
    return zones


def _read_json_object(p: Path) -> dict[str, object]:
    try:
        raw = json.loads(p.read_text())
    except UnicodeDecodeError as exc:
        raise BadDataFile(p, "not UTF-8 text", fix=TRACE_FIX) from exc
    except json.JSONDecodeError as exc:
        what = "empty file" if not exc.doc.strip() else f"not valid JSON ({exc.msg})"
        raise BadDataFile(p, what, line=exc.lineno if exc.doc.strip() else None, fix=TRACE_FIX) from exc
    if not isinstance(raw, dict):
        raise BadDataFile(p, f"must hold a JSON object, got {type(raw).__name__}", fix=TRACE_FIX)
    return raw


def _choice(raw: dict[str, object], key: str, allowed: tuple[str, ...], bad: FieldError) -> str:
    v = raw.get(key, allowed[0])
    if v not in allowed:
        raise bad(key, f"must be one of {', '.join(allowed)}, got {v!r}")
    return str(v)


def _trace_counts(v: object, nodes: int, bad: FieldError) -> IntArray:
    """``available`` as int64 counts in 0..nodes, or the first bad tick named."""
    if v is None:
        raise bad("available", "missing")
    if not isinstance(v, list) or not v:
        raise bad("available", "must be a non-empty list of counts, one per tick")
    for i, x in enumerate(v):
        if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x) or x != int(x) \
                or not 0 <= x <= nodes:
            raise bad("available", f"tick {i} is {x!r}; every tick must be a whole count in 0..{nodes} (nodes)")
    return np.asarray(v, dtype=np.int64)


# --------------------------------------------------------------------------------------------
# One CSV reader for every table: the header and every cell checked against the columns
# --------------------------------------------------------------------------------------------
LINE = "__line__"


@dataclass(frozen=True)
class Col:
    """One column a loader reads: its type and the values it accepts.

    ``kind`` is str, int (whole numbers) or float (finite numbers; never NaN or inf). ``blank``
    lets a cell be empty (NaN for numbers); a column that is not ``required`` may be absent from
    the header and then reads as ``default``. ``missing_fix`` replaces the fix when it is absent.
    """

    name: str
    kind: str = "str"
    required: bool = True
    blank: bool = False
    default: str = ""
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[str, ...] | None = None
    unique: bool = False
    missing_fix: str | None = None

    def expects(self) -> str:
        """What a good cell looks like, for the fix of a message."""
        if self.choices:
            what = "one of " + ", ".join(self.choices)
        elif self.kind == "str":
            what = "a non-empty value"
        else:
            what = "a whole number" if self.kind == "int" else "a finite number"
            if self.low is not None:
                what += f" {'>' if self.low_open else '>='} {self.low:g}"
            if self.high is not None:
                what += f" and <= {self.high:g}"
        return f"write {what}" + (" (or leave it blank)" if self.blank else "") + f" in column {self.name}"

    def parse(self, cell: str) -> str | float:
        """The cell's value; raises ValueError with what is wrong with it."""
        if cell == "":
            if self.blank:
                return "" if self.kind == "str" else math.nan
            raise ValueError("empty")
        if self.kind == "str":
            if self.choices is not None and cell not in self.choices:
                raise ValueError(f"{cell!r} is not one of {', '.join(self.choices)}")
            return cell
        try:
            v = float(cell)
        except ValueError:
            raise ValueError(f"{cell!r} is not a number") from None
        if not math.isfinite(v):
            raise ValueError(f"{cell!r} is not a finite number")
        if self.kind == "int" and v != int(v):
            raise ValueError(f"{cell!r} is not a whole number")
        if self.low is not None and (v < self.low or (self.low_open and v == self.low)):
            raise ValueError(f"{cell} is {'<=' if self.low_open else '<'} {self.low:g}")
        if self.high is not None and v > self.high:
            raise ValueError(f"{cell} is > {self.high:g}")
        return v


def read_table(path: Path, what: str, columns: tuple[Col, ...]) -> dict[str, np.ndarray]:
    """Every column of ``columns`` as an array (plus :data:`LINE`, each row's line number).

    Refuses, naming the file, the line and the column: a missing file, an empty file, a header
    without a required column or with one twice, a row with too few or too many cells, a cell of
    the wrong type or range, a repeated id, and a file with no rows. Extra columns are ignored.
    """
    if not path.is_file():
        raise DataNotFound(what, str(path.parent))
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise BadDataFile(path, "empty file (no header line)", fix=f"a {what} starts with a header line")
            index = _header_index(path, header, columns)
            values: dict[str, list[str | float]] = {c.name: [] for c in columns}
            lines: list[int] = []
            seen: dict[str, dict[str, int]] = {c.name: {} for c in columns if c.unique}
            for cells in reader:
                if not cells:
                    continue
                if len(cells) != len(header):
                    raise BadDataFile(path, f"{len(cells)} cells, the header has {len(header)}",
                                      line=reader.line_num, fix="every row needs one cell per header column "
                                      "(a truncated or hand-edited file?)")
                for c in columns:
                    cell = cells[index[c.name]] if c.name in index else c.default
                    try:
                        values[c.name].append(c.parse(cell))
                    except ValueError as exc:
                        raise BadDataFile(path, str(exc), line=reader.line_num, column=c.name,
                                          fix=c.expects()) from None
                    if c.unique:
                        first = seen[c.name].setdefault(cell, reader.line_num)
                        if first != reader.line_num:
                            raise BadDataFile(path, f"{cell!r} repeats line {first}", line=reader.line_num,
                                              column=c.name, fix=f"give each row its own {c.name}")
                lines.append(reader.line_num)
    except UnicodeDecodeError as exc:
        raise BadDataFile(path, "not UTF-8 text", fix=f"a {what} is a UTF-8 CSV file") from exc
    except csv.Error as exc:
        raise BadDataFile(path, f"not a CSV file ({exc})", fix=f"a {what} is a CSV file") from exc
    if not lines:
        raise BadDataFile(path, "no rows after the header", fix=f"a {what} needs at least one row")
    out: dict[str, np.ndarray] = {LINE: np.asarray(lines, dtype=np.int64)}
    for c in columns:
        dtype = {"str": np.str_, "int": np.int64, "float": np.float64}[c.kind]
        out[c.name] = np.asarray(values[c.name], dtype=dtype)
    return out


def _header_index(path: Path, header: list[str], columns: tuple[Col, ...]) -> dict[str, int]:
    names = [h.strip() for h in header]
    twice = sorted({h for h in names if names.count(h) > 1})
    if twice:
        raise BadDataFile(path, f"header names {', '.join(twice)} more than once", line=1,
                          fix="keep one column of each name")
    missing = sorted((c for c in columns if c.required and c.name not in names), key=lambda c: c.missing_fix is None)
    if missing:
        miss = ", ".join(c.name for c in missing)
        fix = missing[0].missing_fix or "the header needs: " + ", ".join(c.name for c in columns if c.required)
        raise BadDataFile(path, f"no {miss} column{'s' if len(missing) > 1 else ''}", fix=fix)
    return {h: i for i, h in enumerate(names)}


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


GCE_COLUMNS = (
    Col("vm", unique=True), Col("zone"), Col("machine_type"), Col("launched_at"),
    Col("lifetime_seconds", "float", low=0.0, low_open=True),
    Col("outcome", choices=("preempted", "stopped")), Col("day_of_week"),
    Col("hour_of_day", "int", low=0, high=23), Col("workload"),
)


def load_gce_lifetimes(path: str | Path) -> GceLifetimes:
    """Read ``lifetimes.csv`` (see :data:`GCE_COLUMNS` for what each column must hold)."""
    t = read_table(Path(path), "Google preemption lifetimes (gce-preemptions/lifetimes.csv)", GCE_COLUMNS)
    return GceLifetimes(
        vm=t["vm"],
        zone=t["zone"],
        machine_type=t["machine_type"],
        launched_at=t["launched_at"],
        lifetime_hours=t["lifetime_seconds"] / HOUR,
        preempted=t["outcome"] == "preempted",
        day_of_week=t["day_of_week"],
        hour_of_day=t["hour_of_day"],
        workload=t["workload"],
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
    _in_order(p, t, "creation_time", "scheduled_time")
    _in_order(p, t, "scheduled_time", "deletion_time")
    _in_order(p, t, "creation_time", "deletion_time")
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


def _in_order(path: Path, t: dict[str, np.ndarray], first: str, then: str) -> None:
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


DLRM_COLUMNS = (
    Col("instance_sn", unique=True), Col("app_name"), Col("gpu_request", "float", low=0.0),
    Col("creation_time", "float", low=0.0, blank=True), Col("scheduled_time", "float", low=0.0, blank=True),
    Col("deletion_time", "float", low=0.0, blank=True),
)


def load_dlrm_demand(path: str | Path, hours: int = DLRM_HOURS) -> TenantDemand:
    """Sum ``gpu_request`` of every instance alive in each hour, per ``app_name`` (one tenant each).

    An instance is alive from ``scheduled_time`` (else ``creation_time``; blank = before the trace
    start) to ``deletion_time`` (blank = after the trace end); a partial hour counts pro rata.
    """
    p = Path(path)
    t = read_table(p, "Alibaba DLRM trace (alibaba-dlrm/disaggregated_DLRM_trace.csv)", DLRM_COLUMNS)
    _in_order(p, t, "creation_time", "scheduled_time")
    _in_order(p, t, "scheduled_time", "deletion_time")
    apps = sorted(set(t["app_name"].tolist()), key=_natural_key)
    index = {a: i for i, a in enumerate(apps)}
    gpus = np.zeros((len(apps), hours))
    edges = np.arange(hours + 1) * HOUR
    sched, created, deleted = t["scheduled_time"], t["creation_time"], t["deletion_time"]
    for i, app in enumerate(t["app_name"].tolist()):
        start = _first_number(sched[i], created[i], default=0.0)
        end = _first_number(deleted[i], default=hours * HOUR)
        g = float(t["gpu_request"][i])
        if g <= 0 or end <= start:
            continue
        overlap = np.clip(np.minimum(edges[1:], end) - np.maximum(edges[:-1], start), 0.0, HOUR)
        gpus[index[app]] += g * overlap / HOUR
    return TenantDemand(tenants=apps, gpus=gpus, hours=hours)


def _first_number(*values: float, default: float) -> float:
    for v in values:
        if not math.isnan(v):
            return float(v)
    return default


def _natural_key(s: str) -> tuple[str, int]:
    head, _, tail = s.rpartition("_")
    return (head, int(tail)) if tail.isdigit() else (s, -1)


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
    damaged: str = ""  # the first problem found (a loader's refusal or a checksum mismatch)


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
        root = self.require("multiregion-h100")
        return check_aligned_zones(root, [self._load(f, load_spot_trace) for f in sorted(root.glob("*.json"))])

    # -- tables ------------------------------------------------------------------------------
    def gce_lifetimes(self) -> GceLifetimes:
        return self._load(self.require("gce-preemptions"), load_gce_lifetimes)

    def spot_gpu_nodes(self) -> NodeList:
        return self._load(self.require("alibaba-spot-gpu"), load_spot_gpu_nodes)

    def openb_nodes(self) -> NodeList:
        return self._load(self.require("alibaba-openb"), load_openb_nodes)

    def openb_pods(self, variant: str = "default", *, replay: bool = True) -> PodList:
        """``openb_pod_list_<variant>.csv``; ``replay=False`` also reads the static snapshots."""
        p = self.require("alibaba-openb").parent / f"openb_pod_list_{variant}.csv"
        if replay:
            return self._load(p, load_openb_pods)
        return self._load(p, lambda f: load_openb_pods(f, replay=False), key=f"{p}#snapshot")

    def dlrm_demand(self) -> TenantDemand:
        return self._load(self.require("alibaba-dlrm"), load_dlrm_demand)

    # -- listing -----------------------------------------------------------------------------
    def datasets(self) -> list[DatasetInfo]:
        return [self._info(name) for name in DATASETS]

    def _info(self, name: str) -> DatasetInfo:
        p = self.path(name)
        if not p.exists():
            return DatasetInfo(name, p, False)
        if name in ("spot-traces", "multiregion-h100"):
            trace_files = self.spot_trace_files() if name == "spot-traces" else sorted(p.glob("*.json"))
            traces, problems = self._readable_traces(trace_files)
            if name == "multiregion-h100" and not problems:
                try:
                    check_aligned_zones(p, traces)
                except BadDataFile as exc:
                    problems.append(str(exc))
            unit = "traces" if name == "spot-traces" else "zones"
            line = f"{len(traces)} {unit}" + (f", {len(problems)} damaged" if problems else "")
            return DatasetInfo(name, p, True, len(trace_files), line, problems[0] if problems else self._checksums(name))
        summary = {
            "gce-preemptions": lambda: f"{len(self.gce_lifetimes())} VMs, {self.gce_lifetimes().n_preempted} preempted",
            "alibaba-spot-gpu": lambda: f"{len(self.spot_gpu_nodes())} nodes, {self.spot_gpu_nodes().total_gpus} GPUs",
            "alibaba-openb": lambda: f"{len(self.openb_nodes())} nodes, {len(self.openb_pods())} pods",
            "alibaba-dlrm": lambda: f"{len(self.dlrm_demand())} tenants x {self.dlrm_demand().hours} h",
        }[name]
        files = len(list(p.parent.glob("*.csv")))
        try:
            return DatasetInfo(name, p, True, files, summary(), self._checksums(name))
        except (DataCorrupt, DataNotFound) as exc:
            return DatasetInfo(name, p, True, files, "", str(exc))

    def _readable_traces(self, files: list[Path]) -> tuple[list[SpotTrace], list[str]]:
        """The trace files that load, and one message per file that does not."""
        traces: list[SpotTrace] = []
        problems: list[str] = []
        for f in files:
            try:
                traces.append(self._load(f, load_spot_trace))
            except DataCorrupt as exc:
                problems.append(str(exc))
        return traces, problems

    def readable_spot_traces(self) -> list[SpotTrace]:
        """Every spot trace and H100 zone that loads (what `data list` tabulates), damaged ones left out."""
        files = [f for name in ("spot-traces", "multiregion-h100") if self.path(name).exists()
                 for f in (self.spot_trace_files() if name == "spot-traces" else sorted(self.path(name).glob("*.json")))]
        return self._readable_traces(files)[0]

    def _checksums(self, name: str) -> str:
        """The first file of the dataset whose sha256 differs from the one `data fetch` pins, or ""."""
        prefix = DATASETS[name].split("/")[0] + "/"
        for rel, want in sorted(SHA256.items()):
            f = self.root / rel
            if rel.startswith(prefix) and f.is_file() and hashlib.sha256(f.read_bytes()).hexdigest() != want:
                return f"{f}: sha256 differs from the one `spotplane data fetch` pinned (truncated or edited?)" \
                       " — re-run `spotplane data fetch`"
        return ""

    def _load(self, path: Path, loader, key: str | None = None):  # type: ignore[no-untyped-def]
        key = key or str(path)
        if key not in self._cache:
            self._cache[key] = loader(path)
        return self._cache[key]

    @cached_property
    def all_spot_traces(self) -> list[SpotTrace]:
        """Every spot trace and H100 zone (what `data list` tabulates)."""
        return self.spot_traces() + self.h100_zones()
