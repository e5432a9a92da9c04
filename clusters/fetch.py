"""``spotplane data fetch``: download the upstream datasets, normalise and verify them.

Every source is pinned to an upstream commit. A download is converted into the normalised
format of ``shared/data/README.md`` (one convention: the number of available instances per
tick) and accepted only if the result hashes to the sha256 pinned in
:mod:`clusters.data_manifest`; files are written atomically (temp file, then rename).

Conversions, by dataset:
- ``spot-traces``: upstream ``{"metadata": {"gap_seconds"}, "data": [...]}`` already counts
  available instances; metadata (cloud, zone, instance type, nodes, date) comes from the path.
- ``multiregion-h100``: upstream ``full.json`` per zone inside a tar.gz stores 1 = *preempted*;
  it is inverted here, with the zone's spot and on-demand prices from ``metadata.price_info``.
- ``gce-preemptions``: upstream ``data.json`` holds each VM's insert operation and either a
  ``compute.instances.preempted`` operation (outcome ``preempted``) or a ``stop`` (outcome
  ``stopped``: a right-censored lifetime, never counted as a preemption).
- Alibaba tables: kept byte for byte.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from clusters.data_manifest import SHA256
from controlplane.core.errors import DataCorrupt, InvalidInput, SpotplaneError

GITHUB_RAW = "https://raw.githubusercontent.com"
SPOT_TRACES = "skypilot-org/spot-traces/b26631383e2b5f5b48a3d700b92ed133edaf452e"
SKYNOMAD = "andylizf/skynomad-artifact/4dc5ecbc3efdccb3db35f34fbd7592ea6c3e015c"
GOOG = "kadupitiya/goog-preemption-data/dcff67b238e20f083478762c7c6502e8003c26e2"
CLUSTERDATA = "alibaba/clusterdata"

Converter = Callable[[bytes], dict[str, bytes]]


@dataclass(frozen=True)
class Source:
    """One upstream file and the normalised files it produces."""

    dataset: str
    url_path: str  # below GITHUB_RAW (or a mirror given with --base-url)
    outputs: tuple[str, ...]
    convert: Converter

    def url(self, base_url: str | None = None) -> str:
        return f"{(base_url or GITHUB_RAW).rstrip('/')}/{self.url_path}"


# --------------------------------------------------------------------------------------------
# Converters
# --------------------------------------------------------------------------------------------
def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


# upstream file suffix -> (instance type, accelerator, accelerators per instance)
_INSTANCE_OF_SUFFIX: dict[str, tuple[str, str | None, int]] = {
    "v100_1": ("p3.2xlarge", "V100", 1),
    "v100_8": ("p3.16xlarge", "V100", 8),
    "k80_1": ("p2.xlarge", "K80", 1),
    "k80_8": ("p2.8xlarge", "K80", 8),
    "intel_64": ("r5.16xlarge", None, 0),
    "c3-88": ("c3-highcpu-88", None, 0),
}
_KEPT = "source value is the number of available instances (checked against raw probe logs); kept as is"


def spot_trace_converter(rel: str) -> Converter:
    """Normalise ``spot-traces/<kind>/<N>-node/<cloud>-<date>/<zone>_<suffix>.json``."""
    kind, nodes_dir, collection, filename = rel.split("/")
    cloud, _, collected = collection.partition("-")
    zone, _, suffix = filename.removesuffix(".json").partition("_")
    instance_type, accelerator, accel_count = _INSTANCE_OF_SUFFIX[suffix]
    nodes = int(nodes_dir.split("-")[0])

    def convert(raw: bytes) -> dict[str, bytes]:
        upstream = json.loads(raw)
        name = f"{cloud}/{zone}/{instance_type}" + (f"/x{nodes}" if nodes > 1 else "")
        out = {
            "name": name,
            "kind": kind,
            "cloud": cloud,
            "zone": zone,
            "instance_type": instance_type,
            "accelerator": accelerator,
            "accelerator_count": accel_count,
            "nodes": nodes,
            "collected": collected,
            "gap_seconds": upstream["metadata"]["gap_seconds"],
            "source": f"skypilot-org/spot-traces {rel}",
            "conversion": _KEPT,
            "available": [int(v) for v in upstream["data"]],
        }
        return {f"spot-traces/{rel}": _dumps(out)}

    return convert


H100_ZONES = (
    "asia-south2-b", "asia-southeast1-b", "asia-southeast1-c", "europe-west1-c", "europe-west3-c",
    "us-central1-a", "us-central1-b", "us-central1-c", "us-east4-a", "us-east4-b", "us-east5-a",
    "us-west1-a", "us-west1-b",
)  # fmt: skip
_H100_SOURCE = "andylizf/skynomad-artifact data/converted_multi_region_aligned_h100_16_merged (full.json)"
_H100_CONVERSION = "source value 1 meant unavailable (at least one of 16 probes launched = available); inverted here"


def convert_h100(raw: bytes) -> dict[str, bytes]:
    """Every zone's ``full.json`` in the SkyNomad tarball, inverted to available = 1."""
    outputs: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tar:
        for member in tar.getmembers():
            if not (member.isfile() and member.name.endswith("full.json")):
                continue
            fh = tar.extractfile(member)
            if fh is None:
                continue
            upstream = json.loads(fh.read())
            meta = upstream["metadata"]
            zone = meta.get("zone") or Path(member.name).parent.name
            if zone not in H100_ZONES:
                continue
            out: dict[str, Any] = {
                "name": f"gcp/{zone}/a3-highgpu-8g",
                "kind": "availability",
                "cloud": "gcp",
                "zone": zone,
                "region": zone.rsplit("-", 1)[0],
                "instance_type": "a3-highgpu-8g",
                "accelerator": "H100",
                "accelerator_count": 8,
                "nodes": 1,
                "collected": str(meta["start_time"])[:10],
                "start_time": meta["start_time"],
                "gap_seconds": meta["gap_seconds"],
                "spot_price_per_hour": meta["price_info"]["price"],
                "on_demand_price_per_hour": meta["price_info"]["on_demand_price"],
                "source": _H100_SOURCE,
                "conversion": _H100_CONVERSION,
            }
            out["available"] = [1 - int(v) for v in upstream["data"]]  # 1 = preempted upstream
            if "gap_filled" in meta:  # how upstream bridged its 10-hour probe outage
                out["gap_filled"] = meta["gap_filled"]
            outputs[f"multiregion-h100/{zone}.json"] = _dumps(out)
    missing = sorted(set(H100_ZONES) - {Path(k).stem for k in outputs})
    if missing:
        raise DataCorrupt(f"H100 archive lacks zones {missing}", fix="check the pinned skynomad-artifact commit")
    return outputs


GCE_COLUMNS = (
    "vm", "zone", "machine_type", "launched_at", "ended_at", "lifetime_seconds", "outcome",
    "day_of_week", "hour_of_day", "workload",
)  # fmt: skip


def convert_gce(raw: bytes) -> dict[str, bytes]:
    """One row per VM of ``data.json``; a stopped VM is a censored lifetime, not a preemption."""
    rows = []
    for vm, rec in json.loads(raw).items():
        preempted = rec.get("compute.instances.preempted")
        end_op = preempted if preempted is not None else rec.get("stop")
        if end_op is None:
            continue  # neither preempted nor stopped: no lifetime was observed
        info = rec["instance_data"]
        rows.append(
            {
                "vm": vm,
                "zone": info["ZONE"],
                "machine_type": info["MACHINE_TYPE"],
                "launched_at": rec["insert"]["insertTime"],
                "ended_at": end_op["insertTime"],
                "lifetime_seconds": repr(float(rec["time_in_sec"])),
                "outcome": "preempted" if preempted is not None else "stopped",
                "day_of_week": rec["day_of_week"],
                "hour_of_day": int(rec["hr_of_day"]),
                "workload": rec["idle_vs_nonidle"],
            }
        )
    rows.sort(key=lambda r: datetime.fromisoformat(str(r["launched_at"])))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=GCE_COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    return {"gce-preemptions/lifetimes.csv": buf.getvalue().encode()}


def keep_as(dest: str) -> Converter:
    return lambda raw: {dest: raw}


# --------------------------------------------------------------------------------------------
# The manifest of sources
# --------------------------------------------------------------------------------------------
def _sources() -> list[Source]:
    sources = [
        Source("spot-traces", f"{SPOT_TRACES}/{rel[len('spot-traces/'):]}", (rel,),
               spot_trace_converter(rel[len("spot-traces/"):]))
        for rel in sorted(SHA256) if rel.startswith("spot-traces/")
    ]  # fmt: skip
    sources.append(
        Source(
            "multiregion-h100",
            f"{SKYNOMAD}/data/converted_multi_region_aligned_h100_16_merged.tar.gz",
            tuple(f"multiregion-h100/{z}.json" for z in H100_ZONES),
            convert_h100,
        )
    )
    sources.append(
        Source("gce-preemptions", f"{GOOG}/data/data.json", ("gce-preemptions/lifetimes.csv",), convert_gce)
    )
    tables = {
        "alibaba-spot-gpu/node_info_df.csv": "0d3dcd97c6e674634758c908c775e11b94c17575/cluster-trace-v2026-spot-gpu",
        "alibaba-openb/openb_node_list_gpu_node.csv": "50a91c7c74abe3b658188dc78ac1dd302970d40c/cluster-trace-gpu-v2023/csv",
        "alibaba-openb/openb_pod_list_default.csv": "50a91c7c74abe3b658188dc78ac1dd302970d40c/cluster-trace-gpu-v2023/csv",
        "alibaba-openb/openb_pod_list_gpushare40.csv": "0c9677bb156ded9c63ca40d9aa54cd31d3e75061/cluster-trace-gpu-v2023/csv",
        "alibaba-openb/openb_pod_list_multigpu20.csv": "b937928cf81f0edb6fe33634d01f2069a8d6ab17/cluster-trace-gpu-v2023/csv",
        "alibaba-dlrm/disaggregated_DLRM_trace.csv": "358ef992044f8393cb17d750e360cb5c26b7bdae/cluster-trace-gpu-v2025",
    }
    for dest, where in tables.items():
        dataset, name = dest.split("/")
        sources.append(Source(dataset, f"{CLUSTERDATA}/{where}/{name}", (dest,), keep_as(dest)))
    return sources


SOURCES: list[Source] = _sources()
DATASET_NAMES: tuple[str, ...] = tuple(dict.fromkeys(s.dataset for s in SOURCES))


# --------------------------------------------------------------------------------------------
# Fetching
# --------------------------------------------------------------------------------------------
def download(url: str, *, timeout: float = 60.0) -> bytes:
    """GET ``url``; a network failure becomes one clear SpotplaneError."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - fixed https/mirror URL
            return bytes(resp.read())
    except (urllib.error.URLError, OSError) as exc:
        raise SpotplaneError(
            f"could not download {url} ({exc})",
            fix="check the network, or pass --base-url for a mirror, or copy the data into --data-dir",
        ) from exc


def verify(outputs: dict[str, bytes]) -> None:
    """Refuse outputs whose sha256 differs from the pinned one."""
    for rel, blob in outputs.items():
        got = hashlib.sha256(blob).hexdigest()
        want = SHA256.get(rel)
        if want is None:
            raise DataCorrupt(f"{rel}: no pinned sha256 for this file")
        if got != want:
            raise DataCorrupt(
                f"{rel}: sha256 {got[:16]}... differs from the pinned {want[:16]}...",
                fix="upstream changed or the download was cut short; retry, or report it",
            )


def write_atomic(path: Path, blob: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fetch_all(
    dest: str | Path,
    *,
    only: Sequence[str] | None = None,
    if_missing: bool = False,
    base_url: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[str]:
    """Fetch every dataset (or ``only`` those) into ``dest``; returns one report line per dataset."""
    root = Path(dest)
    unknown = sorted(set(only or ()) - set(DATASET_NAMES))
    if unknown:
        raise InvalidInput("--only", f"unknown dataset(s) {unknown}", fix=f"choose from {', '.join(DATASET_NAMES)}")
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    chosen = [s for s in SOURCES if not only or s.dataset in only]
    counts: dict[str, list[int]] = {}
    for i, source in enumerate(chosen, 1):
        done = counts.setdefault(source.dataset, [0, 0])
        if if_missing and all((root / o).exists() for o in source.outputs):
            done[1] += len(source.outputs)
            continue
        say(f"[{i}/{len(chosen)}] {source.dataset}: {source.url_path.rsplit('/', 1)[-1]}")
        outputs = source.convert(download(source.url(base_url)))
        verify(outputs)
        for rel, blob in outputs.items():
            write_atomic(root / rel, blob)
        done[0] += len(outputs)
    return [
        f"{name}: {fetched} file(s) fetched and verified, {kept} already present in {root}"
        for name, (fetched, kept) in counts.items()
    ]
