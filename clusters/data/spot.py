"""Spot availability traces (spot-traces/, multiregion-h100/): one JSON file per zone and instance type."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from clusters.data.table import BoolArray, IntArray
from controlplane.core.errors import BadDataFile, DataNotFound, InvalidInput
from controlplane.core.units import HOUR


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
