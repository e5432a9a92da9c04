"""The data directory's catalog: which datasets are present, and each one loaded by kind."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from clusters.data.dlrm import TenantDemand, load_dlrm_demand
from clusters.data.gce import GceLifetimes, load_gce_lifetimes
from clusters.data.openb import (
    NodeList,
    PodList,
    load_openb_nodes,
    load_openb_pods,
    load_spot_gpu_nodes,
)
from clusters.data.spot import SpotTrace, check_aligned_zones, load_spot_trace
from clusters.data_manifest import SHA256
from controlplane.core.errors import BadDataFile, DataCorrupt, DataNotFound

# Relative paths of the datasets (what `spotplane data list` checks and `data fetch` writes).
DATASETS: dict[str, str] = {
    "spot-traces": "spot-traces",
    "multiregion-h100": "multiregion-h100",
    "gce-preemptions": "gce-preemptions/lifetimes.csv",
    "alibaba-spot-gpu": "alibaba-spot-gpu/node_info_df.csv",
    "alibaba-openb": "alibaba-openb/openb_node_list_gpu_node.csv",
    "alibaba-dlrm": "alibaba-dlrm/disaggregated_DLRM_trace.csv",
}


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
