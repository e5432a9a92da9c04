"""The loader on every dataset in the data directory, and the errors for missing ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from clusters.data.catalog import DATASETS, DataCatalog
from clusters.data.spot import load_spot_trace
from controlplane.core.config import DataDirSource, resolve_data_dir
from controlplane.core.errors import BadDataFile, DataNotFound, InvalidInput


def test_every_dataset_is_listed_present(catalog: DataCatalog) -> None:
    infos = {i.name: i for i in catalog.datasets()}
    assert set(infos) == set(DATASETS)
    assert all(i.present for i in infos.values()), [i.name for i in infos.values() if not i.present]


def test_table3_traces_are_the_eight_aws_pairs(catalog: DataCatalog) -> None:
    traces = catalog.spot_traces("availability/1-node/aws-10-26-2022")
    assert len(traces) == 8
    for t in traces:
        assert t.gap_seconds == 600 and t.nodes == 1 and t.cloud == "aws"
        assert set(np.unique(t.available)) <= {0, 1}
        assert 24 * 25 < t.hours < 24 * 29  # 27 days
        assert 0.0 < t.availability_fraction < 1.0


def test_multinode_traces_count_instances(catalog: DataCatalog) -> None:
    sixteen = catalog.spot_traces("availability/16-node")
    assert sixteen and all(t.nodes == 16 and t.available.max() <= 16 for t in sixteen)
    assert any(t.available.max() == 16 for t in sixteen)
    four = catalog.spot_traces("preemption/4-node")
    assert four and all(t.nodes == 4 and t.kind == "preemption" for t in four)


def test_h100_zones_are_aligned_with_prices(catalog: DataCatalog) -> None:
    zones = catalog.h100_zones()
    assert len(zones) == 13
    assert len({z.n_ticks for z in zones}) == 1 and len({z.start_time for z in zones}) == 1
    for z in zones:
        assert z.spot_price_per_hour and z.on_demand_price_per_hour
        assert z.spot_price_per_hour < z.on_demand_price_per_hour
    overall = np.mean([z.available.mean() for z in zones])
    assert overall == pytest.approx(0.767, abs=0.01)  # the README's 76.7%


def test_gce_lifetimes_keep_censored_vms(catalog: DataCatalog) -> None:
    vms = catalog.gce_lifetimes()
    assert len(vms) == 1442 and vms.n_preempted == 717
    assert (~vms.preempted).sum() == 725
    assert vms.lifetime_hours.max() == pytest.approx(24.83, abs=0.01)
    groups = {(mt, z): len(g) for mt, z, g in vms.groups(min_size=40)}
    assert ("n1-highcpu-16", "us-central1-c") in groups or any(k[0] == "n1-highcpu-16" for k in groups)
    assert all(n >= 40 for n in groups.values())


def test_alibaba_tables(catalog: DataCatalog) -> None:
    nodes = catalog.spot_gpu_nodes()
    assert len(nodes) == 4278 and nodes.total_gpus == 10412
    openb = catalog.openb_nodes()
    assert len(openb) == 1213
    pods = catalog.openb_pods()
    assert len(pods) == 8152 and int((~pods.high_priority).sum()) == 3398
    assert len(catalog.openb_pods("gpushare40")) == 8152
    snapshot = catalog.openb_pods("multigpu20", replay=False)
    assert len(snapshot) > 0 and np.isnan(snapshot.creation_time).all() and set(snapshot.qos) == {""}
    with pytest.raises(BadDataFile, match="no creation_time, deletion_time, scheduled_time, qos columns — this "
                       "pod list is a static snapshot and cannot be replayed; use openb_pod_list_default.csv"):
        catalog.openb_pods("multigpu20")


def test_dlrm_demand_is_156_tenants_by_744_hours(catalog: DataCatalog) -> None:
    demand = catalog.dlrm_demand()
    assert demand.gpus.shape == (156, 744) and demand.tenants[0] == "app_0"
    assert (demand.gpus >= 0).all()
    peak = demand.gpus.max(axis=1)
    assert peak.max() == pytest.approx(390, rel=0.15)  # "from a few GPUs to ~390"


def test_missing_dataset_names_file_place_and_fix(tmp_path: Path) -> None:
    catalog = DataCatalog(tmp_path)
    with pytest.raises(DataNotFound) as err:
        catalog.gce_lifetimes()
    msg = str(err.value)
    assert "gce-preemptions/lifetimes.csv" in msg and str(tmp_path) in msg
    assert "spotplane data fetch" in msg
    assert not any(i.present for i in catalog.datasets())


def test_window_past_the_end_is_refused(catalog: DataCatalog) -> None:
    t = catalog.spot_traces("availability/1-node/aws-10-26-2022")[0]
    with pytest.raises(InvalidInput, match="start_tick"):
        t.window(t.n_ticks - 5, 10)


def test_corrupt_trace_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"name": "x"}')
    with pytest.raises(BadDataFile) as err:
        load_spot_trace(bad)
    assert str(err.value) == f"{bad}, column 'gap_seconds': missing — re-run `spotplane data fetch`, or see the " \
        "spot trace format in shared/data/README.md"


def test_data_dir_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_data_dir(tmp_path) == (tmp_path, DataDirSource.FLAG)
    monkeypatch.setenv("SPOTPLANE_DATA_DIR", str(tmp_path / "env"))
    assert resolve_data_dir() == (tmp_path / "env", DataDirSource.ENV)
    monkeypatch.delenv("SPOTPLANE_DATA_DIR")
    assert resolve_data_dir()[1] in (DataDirSource.SHARED, DataDirSource.CACHE)
