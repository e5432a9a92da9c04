"""Every loader on hand-made malformed files: one clear error naming the file, line and column, or
a correct result. Property-based where a whole family of inputs must behave alike (hypothesis)."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusters.data.catalog import DataCatalog
from clusters.data.dlrm import load_dlrm_demand
from clusters.data.gce import load_gce_lifetimes
from clusters.data.openb import load_openb_nodes, load_openb_pods, load_spot_gpu_nodes
from clusters.data.spot import load_spot_trace
from controlplane.core.errors import BadDataFile, DataNotFound
from controlplane.core.units import HOUR
from policies.sim.workloads import tasks_from_pods

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
PODS = [
    "p0,1000,1024,1,1000,,LS,Running,0,500,10",
    "p1,1000,1024,2,1000,V100M16|G2,BE,Running,20,300,40",
    "p2,1000,1024,1,500,,Burstable,Pending,30,,",
]
HYP = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def pods_file(tmp_path: Path, rows: list[str] = PODS, header: str = POD_HEADER) -> Path:
    return write(tmp_path / "pods.csv", "\n".join([header, *rows]) + "\n")


def refused(loader, path: Path) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(BadDataFile) as err:
        loader(path)
    return str(err.value)


# --------------------------------------------------------------------------------------------
# openb pod lists
# --------------------------------------------------------------------------------------------
def test_a_good_pod_list_loads_with_blank_times_as_nan(tmp_path: Path) -> None:
    pods = load_openb_pods(pods_file(tmp_path))
    assert pods.name.tolist() == ["p0", "p1", "p2"] and pods.num_gpu.tolist() == [1, 2, 1]
    assert pods.gpu_spec.tolist() == ["", "V100M16|G2", ""] and pods.qos.tolist() == ["LS", "BE", "Burstable"]
    assert pods.creation_time.tolist() == [0.0, 20.0, 30.0]
    assert pods.duration_seconds[:2].tolist() == [490.0, 260.0] and math.isnan(pods.scheduled_time[2])


def test_extra_columns_are_ignored_and_optional_ones_may_be_absent(tmp_path: Path) -> None:
    p = pods_file(tmp_path, ["a,x,1,1000,LS,0,100,5,extra"],
                  header="name,note,num_gpu,gpu_milli,qos,creation_time,deletion_time,scheduled_time,more")
    pods = load_openb_pods(p)
    assert pods.cpu_milli.tolist() == [0.0] and pods.gpu_spec.tolist() == [""] and pods.pod_phase.tolist() == ["Running"]
    assert pods.duration_seconds.tolist() == [95.0]


def test_a_missing_time_column_says_the_list_is_a_snapshot(tmp_path: Path) -> None:
    p = pods_file(tmp_path, ["p0,1000,1024,1,1000,,LS,Running,0,500"], header=POD_HEADER.rsplit(",", 1)[0])
    assert refused(load_openb_pods, p) == (
        f"{p}: no scheduled_time column — this pod list is a static snapshot and cannot be replayed; "
        "use openb_pod_list_default.csv or gpushare40.csv")


def test_a_missing_qos_column_names_every_required_column(tmp_path: Path) -> None:
    p = pods_file(tmp_path, ["p0,1,1000,0,5,1"], header="name,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time")
    assert refused(load_openb_pods, p) == (
        f"{p}: no qos column — the header needs: name, num_gpu, gpu_milli, qos, creation_time, deletion_time, "
        "scheduled_time")


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty file (no header line)"),
    (POD_HEADER + "\n", "no rows after the header"),
    (POD_HEADER + "\n\n\n", "no rows after the header"),
])
def test_empty_files_are_refused(tmp_path: Path, text: str, message: str) -> None:
    p = write(tmp_path / "pods.csv", text)
    assert refused(load_openb_pods, p).startswith(f"{p}: {message} — ")


@pytest.mark.parametrize(("row", "column", "message", "fix"), [
    ("p9,1000,1024,1,1000,,LS,Running,abc,500,10", "creation_time", "'abc' is not a number",
     "write a finite number >= 0 in column creation_time"),
    ("p9,1000,1024,1,1000,,LS,Running,nan,500,10", "creation_time", "'nan' is not a finite number",
     "write a finite number >= 0 in column creation_time"),
    ("p9,1000,1024,1,1000,,LS,Running,0,inf,10", "deletion_time", "'inf' is not a finite number",
     "write a finite number >= 0 (or leave it blank) in column deletion_time"),
    ("p9,1000,1024,1,1000,,LS,Running,-5,500,10", "creation_time", "-5 is < 0",
     "write a finite number >= 0 in column creation_time"),
    ("p9,1000,1024,1.5,1000,,LS,Running,0,500,10", "num_gpu", "'1.5' is not a whole number",
     "write a whole number >= 0 in column num_gpu"),
    ("p9,1000,1024,1,1200,,LS,Running,0,500,10", "gpu_milli", "1200 is > 1000",
     "write a finite number >= 0 and <= 1000 in column gpu_milli"),
    ("p9,1000,1024,1,1000,,gold,Running,0,500,10", "qos", "'gold' is not one of LS, Guaranteed, Burstable, BE",
     "write one of LS, Guaranteed, Burstable, BE in column qos"),
    ("p9,1000,1024,1,1000,,LS,Running,,500,10", "creation_time", "empty",
     "write a finite number >= 0 in column creation_time"),
    ("p0,1000,1024,1,1000,,LS,Running,0,500,10", "name", "'p0' repeats line 2", "give each row its own name"),
    ("p9,1000,1024,1,1000,,LS,Running,50,500,10", "scheduled_time", "scheduled_time 10 is before creation_time 50",
     "scheduled_time must be >= creation_time (or blank)"),
    ("p9,1000,1024,1,1000,,LS,Running,0,5,10", "deletion_time", "deletion_time 5 is before scheduled_time 10",
     "deletion_time must be >= scheduled_time (or blank)"),
])
def test_a_bad_cell_names_file_line_column_and_fix(tmp_path: Path, row: str, column: str, message: str,
                                                   fix: str) -> None:
    p = pods_file(tmp_path, [*PODS, row])
    assert refused(load_openb_pods, p) == f"{p}, line 5, column {column!r}: {message} — {fix}"


def test_a_truncated_row_is_refused(tmp_path: Path) -> None:
    p = write(tmp_path / "pods.csv", "\n".join([POD_HEADER, *PODS])[:-12])
    assert refused(load_openb_pods, p) == (
        f"{p}, line 4: 8 cells, the header has 11 — every row needs one cell per header column "
        "(a truncated or hand-edited file?)")


def test_a_repeated_header_column_is_refused(tmp_path: Path) -> None:
    p = pods_file(tmp_path, [r + ",1" for r in PODS], header=POD_HEADER + ",qos")
    assert refused(load_openb_pods, p) == f"{p}, line 1: header names qos more than once — keep one column of each name"


def test_a_binary_file_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "pods.csv"
    p.write_bytes(b"\xff\xfe\x00garbage")
    assert refused(load_openb_pods, p) == f"{p}: not UTF-8 text — a openb pod list (pods.csv) is a UTF-8 CSV file"


def test_a_missing_file_is_data_not_found(tmp_path: Path) -> None:
    with pytest.raises(DataNotFound, match="openb pod list"):
        load_openb_pods(tmp_path / "nope.csv")


pod_rows = st.lists(
    st.tuples(
        st.integers(0, 8),  # num_gpu
        st.sampled_from([0, 250, 500, 1000]),  # gpu_milli
        st.sampled_from(["LS", "Guaranteed", "Burstable", "BE"]),
        st.integers(0, 10**7),  # creation
        st.one_of(st.none(), st.integers(0, 10**5)),  # schedule delay (None: never scheduled)
        st.integers(0, 10**6),  # run time
    ),
    min_size=1, max_size=40,
)


def _pod_csv(rows: list[tuple[int, int, str, int, int | None, int]]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["name", "num_gpu", "gpu_milli", "qos", "creation_time", "deletion_time", "scheduled_time"])
    for i, (g, m, q, c, delay, run) in enumerate(rows):
        sched = "" if delay is None else c + delay
        w.writerow([f"pod-{i}", g, m, q, c, "" if delay is None else c + delay + run, sched])
    return out.getvalue()


@HYP
@given(rows=pod_rows, order=st.randoms(use_true_random=False))
def test_any_valid_pod_list_round_trips_in_any_row_order(tmp_path: Path, rows, order) -> None:  # type: ignore[no-untyped-def]
    p = write(tmp_path / "pods.csv", _pod_csv(rows))
    pods = load_openb_pods(p)
    assert pods.num_gpu.tolist() == [r[0] for r in rows] and pods.creation_time.tolist() == [r[3] for r in rows]
    assert np.isnan(pods.scheduled_time).tolist() == [r[4] is None for r in rows]
    lines = p.read_text().splitlines()
    body = lines[1:]
    order.shuffle(body)
    shuffled = load_openb_pods(write(tmp_path / "shuffled.csv", "\n".join([lines[0], *body]) + "\n"))
    # unsorted times are fine: the replay sorts by submission
    assert tasks_from_pods(shuffled) == tasks_from_pods(pods)


@HYP
@given(rows=pod_rows, data=st.data())
def test_any_truncation_loads_a_prefix_or_is_refused(tmp_path: Path, rows, data) -> None:  # type: ignore[no-untyped-def]
    text = _pod_csv(rows)
    cut = data.draw(st.integers(0, len(text) - 1))
    p = write(tmp_path / "pods.csv", text[:cut])
    full = load_openb_pods(write(tmp_path / "full.csv", text))
    try:
        part = load_openb_pods(p)
    except BadDataFile as exc:
        assert str(exc).startswith(str(p))
        return
    n = len(part)
    assert 1 <= n <= len(full)  # every row but a cut last one is the original
    assert part.name[: n - 1].tolist() == full.name[: n - 1].tolist()
    assert part.creation_time[: n - 1].tolist() == full.creation_time[: n - 1].tolist()


@HYP
@given(rows=pod_rows, data=st.data(),
       junk=st.sampled_from(["x", "1e", "NaN", "-inf", "Infinity", "--1", "0x10", "", "1,5"]))
def test_any_junk_time_cell_is_refused_with_its_line(tmp_path: Path, rows, data, junk: str) -> None:  # type: ignore[no-untyped-def]
    lines = _pod_csv(rows).splitlines()
    i = data.draw(st.integers(1, len(lines) - 1))
    cells = next(csv.reader([lines[i]]))
    cells[4] = junk  # creation_time
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(cells)
    lines[i] = out.getvalue()
    p = write(tmp_path / "pods.csv", "\n".join(lines) + "\n")
    assert refused(load_openb_pods, p).startswith(f"{p}, line {i + 1}, column 'creation_time': ")


# --------------------------------------------------------------------------------------------
# node lists, Google lifetimes, DLRM demand
# --------------------------------------------------------------------------------------------
def test_node_lists(tmp_path: Path) -> None:
    good = write(tmp_path / "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model,rack\nn0,64000,1024,8,V100M16,r1\n")
    nodes = load_openb_nodes(good)
    assert nodes.cpus.tolist() == [64.0] and nodes.gpus.tolist() == [8] and nodes.total_gpus == 8
    dup = write(tmp_path / "dup.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,8,G2\nn0,1,1,8,G2\n")
    assert refused(load_openb_nodes, dup) == f"{dup}, line 3, column 'sn': 'n0' repeats line 2 — give each row its own sn"
    spot = write(tmp_path / "spot.csv", "gpu_model,gpu_capacity_num,cpu_num,node_name\nA10,1,-2,0\n")
    assert refused(load_spot_gpu_nodes, spot) == (
        f"{spot}, line 2, column 'cpu_num': -2 is < 0 — write a finite number >= 0 in column cpu_num")
    blank = write(tmp_path / "blank.csv", "gpu_model,gpu_capacity_num,cpu_num,node_name\n,1,2,0\n")
    assert refused(load_spot_gpu_nodes, blank) == (
        f"{blank}, line 2, column 'gpu_model': empty — write a non-empty value in column gpu_model")


GCE_HEADER = "vm,zone,machine_type,launched_at,ended_at,lifetime_seconds,outcome,day_of_week,hour_of_day,workload"


def test_gce_lifetimes(tmp_path: Path) -> None:
    good = write(tmp_path / "l.csv", f"{GCE_HEADER}\nv1,z,n1,t,t,7200,preempted,Monday,10,idle\n"
                 "v2,z,n1,t,t,3600,stopped,Monday,23,idle\n")
    vms = load_gce_lifetimes(good)
    assert vms.lifetime_hours.tolist() == [2.0, 1.0] and vms.preempted.tolist() == [True, False]
    for row, col, msg in [("v3,z,n1,t,t,3600,crashed,Monday,1,idle", "outcome", "'crashed' is not one of"),
                          ("v3,z,n1,t,t,3600,stopped,Monday,24,idle", "hour_of_day", "24 is > 23"),
                          ("v3,z,n1,t,t,0,stopped,Monday,3,idle", "lifetime_seconds", "0 is <= 0")]:
        p = write(tmp_path / "bad.csv", f"{GCE_HEADER}\n{row}\n")
        assert refused(load_gce_lifetimes, p).startswith(f"{p}, line 2, column {col!r}: {msg}")


DLRM_HEADER = "instance_sn,role,app_name,gpu_request,creation_time,scheduled_time,deletion_time"


def test_dlrm_demand_hand_computed(tmp_path: Path) -> None:
    # i0: 1 GPU from 0.5 h to 2 h; i1: 0.5 GPU from before the start to after the end; i2: no GPU
    p = write(tmp_path / "d.csv", f"{DLRM_HEADER}\ni0,HN,app_2,1,1000,{0.5 * HOUR},{2 * HOUR}\n"
              "i1,CN,app_10,0.5,,,\ni2,CN,app_2,0,0,0,100\n")
    d = load_dlrm_demand(p, hours=3)
    assert d.tenants == ["app_2", "app_10"]
    assert d.gpus.tolist() == [[0.5, 1.0, 0.0], [0.5, 0.5, 0.5]]


@pytest.mark.parametrize(("row", "column", "message"), [
    ("i9,HN,app_1,,0,0,10", "gpu_request", "empty"),
    ("i9,HN,app_1,1,0,50,10", "deletion_time", "deletion_time 10 is before scheduled_time 50"),
    ("i9,HN,app_1,1,0,-1,10", "scheduled_time", "-1 is < 0"),
    ("i0,HN,app_1,1,0,0,10", "instance_sn", "'i0' repeats line 2"),
])
def test_dlrm_bad_rows(tmp_path: Path, row: str, column: str, message: str) -> None:
    p = write(tmp_path / "d.csv", f"{DLRM_HEADER}\ni0,HN,app_1,1,0,0,10\n{row}\n")
    assert refused(load_dlrm_demand, p).startswith(f"{p}, line 3, column {column!r}: {message} — ")


# --------------------------------------------------------------------------------------------
# spot traces and H100 zones (JSON)
# --------------------------------------------------------------------------------------------
TRACE = {"name": "aws/z-1a/p3", "kind": "availability", "cloud": "aws", "zone": "z-1a", "instance_type": "p3",
         "nodes": 2, "gap_seconds": 600, "available": [2, 1, 0, 2]}


def trace_file(tmp_path: Path, name: str = "t.json", **changes: object) -> Path:
    doc = {k: v for k, v in {**TRACE, **changes}.items() if v is not ...}
    return write(tmp_path / name, json.dumps(doc))


def test_a_trace_of_one_tick_is_a_correct_trace(tmp_path: Path) -> None:
    t = load_spot_trace(trace_file(tmp_path, available=[1]))
    assert t.n_ticks == 1 and t.hours == pytest.approx(600 / HOUR) and t.availability_fraction == 0.5
    assert t.spot_up().tolist() == [False] and t.spot_up(1).tolist() == [True] and t.region == "z"


@pytest.mark.parametrize(("changes", "message"), [
    ({"available": []}, "column 'available': must be a non-empty list of counts, one per tick"),
    ({"available": [1, 3]}, "column 'available': tick 1 is 3; every tick must be a whole count in 0..2 (nodes)"),
    ({"available": [1, 0.5]}, "column 'available': tick 1 is 0.5; every tick"),
    ({"available": [1, True]}, "column 'available': tick 1 is True; every tick"),
    ({"available": [-1]}, "column 'available': tick 0 is -1; every tick"),
    ({"available": ...}, "column 'available': missing"),
    ({"gap_seconds": 0}, "column 'gap_seconds': must be > 0, got 0"),
    ({"gap_seconds": "600"}, "column 'gap_seconds': must be a finite number >= 0, got '600'"),
    ({"nodes": 0}, "column 'nodes': must be a whole number >= 1, got 0"),
    ({"zone": ""}, "column 'zone': must be a non-empty string, got ''"),
    ({"kind": "outage"}, "column 'kind': must be one of availability, preemption, got 'outage'"),
    ({"start_time": "yesterday"}, "column 'start_time': not an ISO 8601 time ('yesterday')"),
])
def test_bad_trace_fields_are_named(tmp_path: Path, changes: dict[str, object], message: str) -> None:
    p = trace_file(tmp_path, **changes)
    assert refused(load_spot_trace, p).startswith(f"{p}, {message}")


def test_nan_and_inf_in_a_trace_are_refused(tmp_path: Path) -> None:
    p = write(tmp_path / "t.json", json.dumps(TRACE).replace("[2, 1, 0, 2]", "[2, NaN, 0]"))
    assert refused(load_spot_trace, p).startswith(f"{p}, column 'available': tick 1 is nan; every tick")
    p = write(tmp_path / "t.json", json.dumps(TRACE).replace('"gap_seconds": 600', '"gap_seconds": Infinity'))
    assert refused(load_spot_trace, p).startswith(f"{p}, column 'gap_seconds': must be a finite number >= 0, got inf")


@pytest.mark.parametrize(("text", "message"), [
    ("", ": empty file"),
    ("[1, 2]", ": must hold a JSON object, got list"),
    ('{"name": "x", "available": [1, 0', ", line 1: not valid JSON (Expecting ',' delimiter)"),
])
def test_empty_truncated_and_non_object_json(tmp_path: Path, text: str, message: str) -> None:
    p = write(tmp_path / "t.json", text)
    assert refused(load_spot_trace, p).startswith(f"{p}{message} — re-run `spotplane data fetch`")


@HYP
@given(nodes=st.integers(1, 16), data=st.data())
def test_any_trace_in_range_round_trips_and_any_truncation_is_refused(tmp_path: Path, nodes: int, data) -> None:  # type: ignore[no-untyped-def]
    available = data.draw(st.lists(st.integers(0, nodes), min_size=1, max_size=200))
    p = trace_file(tmp_path, nodes=nodes, available=available)
    t = load_spot_trace(p)
    assert t.available.tolist() == available and t.availability_fraction == pytest.approx(np.mean(available) / nodes)
    text = p.read_text()
    cut = write(tmp_path / "cut.json", text[: data.draw(st.integers(0, len(text) - 1))])
    assert refused(load_spot_trace, cut).startswith(str(cut))


def test_misaligned_h100_zones_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "multiregion-h100"
    root.mkdir()
    prices = {"spot_price_per_hour": 10.0, "on_demand_price_per_hour": 80.0}
    trace_file(root, "a-1.json", zone="a-1", **prices)
    trace_file(root, "b-1.json", zone="b-1", **prices)
    assert [z.zone for z in DataCatalog(tmp_path).h100_zones()] == ["a-1", "b-1"]
    late = trace_file(root, "c-1.json", zone="c-1", available=[1, 1, 1], **prices)
    with pytest.raises(BadDataFile) as err:
        DataCatalog(tmp_path).h100_zones()
    assert str(err.value) == (f"{late}, column 'available': 3 differs from 4 in a-1.json — every zone must be on "
                              "one clock: same gap_seconds, ticks and start_time")
    unpriced = trace_file(root, "c-1.json", zone="c-1")
    with pytest.raises(BadDataFile) as err:
        DataCatalog(tmp_path).h100_zones()
    assert str(err.value).startswith(f"{unpriced}, column 'spot_price_per_hour': missing; a zone needs its prices")
