"""Google's spot VM lifetimes (gce-preemptions/lifetimes.csv), the preemption models' data."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clusters.data.table import BoolArray, Col, FloatArray, IntArray, StrArray, read_table
from controlplane.core.units import HOUR


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
