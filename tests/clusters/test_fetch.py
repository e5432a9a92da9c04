"""`spotplane data fetch` against a local HTTP server that serves upstream-format files.

The files served are rebuilt from ../shared/data in each upstream's own format (preempted flag
for the H100 traces, operations for the Google VMs, a tarball for SkyNomad); the fetch must turn
them back into exactly the normalised files the loader reads, or refuse them.
"""

from __future__ import annotations

import csv
import io
import json
import random
import tarfile
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from clusters import fetch
from clusters.data.catalog import DataCatalog
from controlplane.cli.main import main
from controlplane.core.errors import DataCorrupt, InvalidInput, SpotplaneError


def _upstream_spot_trace(normalised: dict) -> bytes:  # type: ignore[type-arg]
    return json.dumps({"metadata": {"gap_seconds": normalised["gap_seconds"]}, "data": normalised["available"]}).encode()


def _upstream_h100(data_root: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for zone in fetch.H100_ZONES:
            d = json.loads((data_root / "multiregion-h100" / f"{zone}.json").read_text())
            meta = {
                "gap_seconds": d["gap_seconds"],
                "start_time": d["start_time"],
                "zone": zone,
                "price_info": {"price": d["spot_price_per_hour"], "on_demand_price": d["on_demand_price_per_hour"]},
            }
            if "gap_filled" in d:
                meta["gap_filled"] = d["gap_filled"]
            blob = json.dumps({"metadata": meta, "data": [1 - a for a in d["available"]]}).encode()
            info = tarfile.TarInfo(f"converted_multi_region_aligned_h100_16_merged/{zone}/full.json")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return buf.getvalue()


def _upstream_gce(data_root: Path) -> bytes:
    with (data_root / "gce-preemptions" / "lifetimes.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    random.Random(0).shuffle(rows)  # upstream is keyed by VM name in no particular order
    vms = {}
    for r in rows:
        rec = {
            "instance_data": {"NAME": r["vm"], "ZONE": r["zone"], "MACHINE_TYPE": r["machine_type"], "PREEMPTIBLE": "true"},
            "time_in_sec": float(r["lifetime_seconds"]),
            "insert": {"insertTime": r["launched_at"], "operationType": "insert"},
            "day_of_week": r["day_of_week"],
            "hr_of_day": int(r["hour_of_day"]),
            "idle_vs_nonidle": r["workload"],
        }
        op = "compute.instances.preempted" if r["outcome"] == "preempted" else "stop"
        rec[op] = {"insertTime": r["ended_at"], "operationType": op}
        vms[r["vm"]] = rec
    return json.dumps(vms).encode()


@pytest.fixture(scope="module")
def upstream(data_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local mirror of raw.githubusercontent.com holding every source in upstream format."""
    web = tmp_path_factory.mktemp("upstream")
    for source in fetch.SOURCES:
        target = web / source.url_path
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.dataset == "spot-traces":
            target.write_bytes(_upstream_spot_trace(json.loads((data_root / source.outputs[0]).read_text())))
        elif source.dataset == "multiregion-h100":
            target.write_bytes(_upstream_h100(data_root))
        elif source.dataset == "gce-preemptions":
            target.write_bytes(_upstream_gce(data_root))
        else:
            target.write_bytes((data_root / source.outputs[0]).read_bytes())
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(web)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.mark.slow
def test_fetch_reproduces_the_shared_data_byte_for_byte(upstream: str, data_root: Path, tmp_path: Path) -> None:
    lines = fetch.fetch_all(tmp_path, base_url=upstream, progress=lambda _: None)
    assert len(lines) == len(fetch.DATASET_NAMES)
    for rel in fetch.SHA256:
        assert (tmp_path / rel).read_bytes() == (data_root / rel).read_bytes(), rel
    ours, shared = DataCatalog(tmp_path), DataCatalog(data_root)
    assert [i.summary for i in ours.datasets()] == [i.summary for i in shared.datasets()]
    np.testing.assert_array_equal(ours.gce_lifetimes().preempted, shared.gce_lifetimes().preempted)
    for a, b in zip(ours.h100_zones(), shared.h100_zones(), strict=True):
        np.testing.assert_array_equal(a.available, b.available)
        assert a.on_demand_price_per_hour == b.on_demand_price_per_hour


def test_h100_flag_is_inverted_and_stopped_vms_stay_censored(upstream: str, tmp_path: Path) -> None:
    fetch.fetch_all(tmp_path, only=["multiregion-h100", "gce-preemptions"], base_url=upstream, progress=lambda _: None)
    cat = DataCatalog(tmp_path)
    overall = np.mean([z.available.mean() for z in cat.h100_zones()])
    assert overall == pytest.approx(0.767, abs=0.01)  # available, not preempted
    vms = cat.gce_lifetimes()
    assert len(vms) == 1442 and vms.n_preempted == 717


def test_if_missing_downloads_nothing_when_present(data_root: Path) -> None:
    said: list[str] = []
    lines = fetch.fetch_all(data_root, if_missing=True, base_url="http://127.0.0.1:9", progress=said.append)
    assert said == [] and all("0 file(s) fetched" in line for line in lines)


def test_tampered_download_is_refused_and_nothing_written(upstream: str, tmp_path: Path) -> None:
    src = next(s for s in fetch.SOURCES if s.dataset == "alibaba-spot-gpu")
    web_file = None
    # serve a truncated copy from a second mirror folder
    mirror = tmp_path / "mirror"
    target = mirror / src.url_path
    target.parent.mkdir(parents=True)
    import urllib.request

    with urllib.request.urlopen(src.url(upstream)) as resp:
        target.write_bytes(resp.read()[:-100])
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(mirror)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(DataCorrupt, match="differs from the pinned"):
            fetch.fetch_all(tmp_path / "out", only=["alibaba-spot-gpu"], base_url=f"http://127.0.0.1:{server.server_address[1]}", progress=lambda _: None)
    finally:
        server.shutdown()
        server.server_close()
    assert web_file is None and not (tmp_path / "out" / src.outputs[0]).exists()


def test_unreachable_mirror_and_unknown_dataset_are_clear(tmp_path: Path) -> None:
    with pytest.raises(SpotplaneError, match="could not download"):
        fetch.fetch_all(tmp_path, only=["gce-preemptions"], base_url="http://127.0.0.1:9", progress=lambda _: None)
    with pytest.raises(InvalidInput, match="--only"):
        fetch.fetch_all(tmp_path, only=["nope"])


def test_real_upstream_records_convert_to_the_shared_rows(data_root: Path) -> None:
    """Two VMs exactly as upstream's data.json stores them (trimmed to the fields used)."""
    upstream = {
        "tjnepf1": {
            "instance_data": {"NAME": "tjnepf1", "ZONE": "us-central1-c", "MACHINE_TYPE": "n1-highcpu-16", "PREEMPTIBLE": "true"},
            "time_in_sec": 2836.621,
            "insert": {"endTime": "2019-03-25T12:23:13.052-07:00", "insertTime": "2019-03-25T12:22:36.614-07:00"},
            "compute.instances.preempted": {"insertTime": "2019-03-25T13:09:53.235-07:00", "operationType": "compute.instances.preempted"},
            "day_of_week": "Monday", "hr_of_day": 13, "idle_vs_nonidle": "non-idle",
        },
        "vyqmmv1": {
            "instance_data": {"NAME": "vyqmmv1", "ZONE": "us-central1-c", "MACHINE_TYPE": "n1-highcpu-16", "PREEMPTIBLE": "true"},
            "time_in_sec": 599.616,
            "insert": {"insertTime": "2019-03-26T08:17:17.529-07:00"},
            "stop": {"insertTime": "2019-03-26T08:27:17.145-07:00", "operationType": "stop"},
            "day_of_week": "Tuesday", "hr_of_day": 8, "idle_vs_nonidle": "non-idle",
        },
    }  # fmt: skip
    out = fetch.convert_gce(json.dumps(upstream).encode())["gce-preemptions/lifetimes.csv"].decode()
    shared = (data_root / "gce-preemptions" / "lifetimes.csv").read_bytes().decode()
    for line in out.splitlines()[1:]:
        assert line in shared.splitlines(), line


def test_cli_fetch_reports_and_exit_codes(upstream: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--data-dir", str(tmp_path), "data", "fetch", "--only", "alibaba-spot-gpu", "--base-url", upstream]) == 0
    out = capsys.readouterr()
    assert "alibaba-spot-gpu: 1 file(s) fetched and verified" in out.out and "[1/1]" in out.err
    assert main(["--data-dir", str(tmp_path), "data", "fetch", "--only", "bogus"]) == 2
    assert "--only: unknown dataset" in capsys.readouterr().err
