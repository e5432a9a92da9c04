"""The Prometheus families after a run of the simulated fleet with preemptions (no Ray): the
exposition parses with prometheus_client's own parser and every count equals what the store's
events, decisions, intents and rows say, across a controller restart."""

from __future__ import annotations

import json
import math
import re
import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from actors.execution.artifacts import artifact_totals
from actors.quota import QuotaAllocatorActor
from clusters.artifacts import LocalArtifactStore
from clusters.sim import SimulatedFleet
from controlplane.core.clock import SimClock
from controlplane.core.counters import CONTROLLER
from controlplane.core.models import Job, JobSpec, JobState, Node
from controlplane.core.readmodels import ForecastRow
from controlplane.core.units import HOUR
from controlplane.reconcile.contracts import ControllerSettings, ExecutorReport
from controlplane.reconcile.controller import Controller
from controlplane.store import Store
from policies.preemption import default_gce_model
from serve.metrics import ApiMetrics, build_registry, exposition

POOLS = {"V100": 6, "H100": 2}
DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "spotplane.json"


@dataclass
class Run:
    store: Store
    db: sqlite3.Connection
    ticks: int
    mid: dict[str, Any]  # a scrape taken while jobs were queued, with the store's view then


def _scrape(store: Store) -> dict[str, Any]:
    text = exposition(build_registry(store)).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _values(fam: Any, *labels: str, suffix: str = "") -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = {}
    for s in fam.samples:
        if s.name == fam.name + suffix:
            key = tuple(s.labels[k] for k in labels)
            out[key] = out.get(key, 0.0) + s.value
    return out


def _queue_view(store: Store, db: sqlite3.Connection) -> dict[tuple[str, str, str], tuple[int, float]]:
    names = {t.id: t.name for t in store.list_tenants()}
    now = store.control_time()
    out: dict[tuple[str, str, str], tuple[int, float]] = {}
    for j in store.list_jobs(state=JobState.QUEUED, limit=100_000):
        (entered,) = db.execute("SELECT MAX(at) FROM events WHERE job_id = ? AND dst = 'QUEUED'",
                                (j.id,)).fetchone()
        key = (j.spec.accelerator or "any", j.kind.value, names[j.tenant_id])
        n, wait = out.get(key, (0, 0.0))
        out[key] = (n + 1, max(wait, now - entered))
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, data_root: Path) -> Run:
    tmp = tmp_path_factory.mktemp("metrics")
    clock = SimClock(start=0.0)
    store = Store(tmp / "spotplane.db")
    fleet = SimulatedFleet.from_options(clock=clock, data_dir=data_root, seed=5,
                                        state_path=tmp / "simfleet.db", spot_capacity=2,
                                        lifetime_model=default_gce_model())

    def controller() -> Controller:
        return Controller(store, fleet, clock, ControllerSettings(pool_nodes=POOLS, deadline_policy="uniform_progress"),
                          epoch=store.take_controller_lease())

    acme, _ = store.create_tenant("acme", max_gpus=100)
    beta, _ = store.create_tenant("beta", max_gpus=100)
    for i in range(4):
        store.submit_job(acme.id, JobSpec(name=f"s{i}", kind="spot", compute_hours=6, workers=2,
                                          accelerator="V100"), now=0.0)
    store.submit_job(beta.id, JobSpec(name="d", kind="deadline", compute_hours=3,
                                      deadline_hours=8, accelerator="V100"), now=0.0)
    store.submit_job(beta.id, JobSpec(name="late", kind="deadline", compute_hours=2,
                                      deadline_hours=2.06, accelerator="H100"), now=0.0)
    db = sqlite3.connect(tmp / "spotplane.db")
    ctl, ticks, mid = controller(), 0, {}
    for k in range(12 * 60):
        if k == 6 * 60:  # a controller restart: counts go on from the store
            ctl, ticks = controller(), ticks + ctl.ticks
        clock.advance(60.0)
        ctl.tick()
        if k == 60:
            store.submit_job(beta.id, JobSpec(name="h", kind="hp", compute_hours=1, workers=4,
                                              accelerator="V100"), now=clock.now())
        if not mid and _queue_view(store, db) and k > 1:
            mid = {"scrape": _scrape(store), "queue": _queue_view(store, db)}
    QuotaAllocatorActor(str(tmp / "spotplane.db"), POOLS, {"V100": 1, "H100": 8}).update(
        {"V100": ([[2.0]], [[0.5]])}, now=clock.now())
    store.put_forecasts([ForecastRow(tenant_id=beta.id, at=clock.now() - 1800.0, horizon_hours=2,
                                     mean=[4.0, 4.0], upper=[5.0, 5.0])])
    return Run(store, db, ticks + ctl.ticks, mid)


def test_every_family_parses_and_the_controller_ones_have_samples(run: Run) -> None:
    fams = _scrape(run.store)
    for name, fam in CONTROLLER.items():
        got = fams[f"spotplane_{name.removesuffix('_total')}"]
        assert got.type == fam.kind, name
        if name not in ("checkpoint_bytes_total", "checkpoint_restore_fallbacks_total",
                        "zone_probes_total", "zone_probe_cost_dollars_total",  # evidence mode
                        "budget_events_total"):  # no tenant here has a budget
            assert any(s.value > 0 for s in got.samples), name
    for name in ("jobs", "nodes", "tenant_spend_dollars", "control_time_seconds",
                 "tenant_on_demand_counterfactual_dollars", "queue_depth",
                 "queue_oldest_wait_seconds", "pool_eta", "hp_demand_forecast_gpus"):
        assert f"spotplane_{name}" in fams, name


def test_preemptions_and_evictions_match_the_events(run: Run) -> None:
    fams = _scrape(run.store)
    rows = run.db.execute("SELECT cause FROM events WHERE kind = 'transition' AND "
                          "dst = 'PREEMPTED'").fetchall()
    by_cause = _values(fams["spotplane_preemptions"], "cause", suffix="_total")
    evicted = sum(1 for (c,) in rows if c.startswith("preempted by"))
    lost = sum(1 for (c,) in rows if " preempted in " in c)
    assert evicted > 0 and lost > 0
    assert by_cause == {k: v for k, v in {("eviction",): evicted, ("preempted",): lost,
                                          ("launch_refused",): sum(1 for (c,) in rows if c.startswith("launch refused"))}.items() if v}
    assert sum(by_cause.values()) == len(rows)
    decisions = run.db.execute("SELECT COUNT(*) FROM decisions WHERE action = 'preempt'").fetchone()[0]
    ev = _values(fams["spotplane_evictions"], "cause", suffix="_total")
    assert ev[("hp_placement",)] == decisions == evicted
    switches = run.db.execute("SELECT COUNT(*) FROM events WHERE dst = 'QUEUED' AND cause LIKE "
                              "'policy:%'").fetchone()[0]
    assert ev.get(("policy_switch",), 0.0) == switches
    nodes = Counter(run.db.execute(
        "SELECT json_extract(n.body, '$.cloud'), json_extract(n.body, '$.zone') FROM events e "
        "JOIN nodes n ON n.id = e.node_id WHERE e.kind = 'node' AND e.dst = 'PREEMPTED'").fetchall())
    got = _values(fams["spotplane_node_preemptions"], "cloud", "zone", suffix="_total")
    assert got == {k: float(v) for k, v in nodes.items()} and sum(got.values()) >= 10


def test_placements_and_launches_match_decisions_and_intents(run: Run) -> None:
    fams = _scrape(run.store)
    placed = Counter(run.db.execute(
        "SELECT j.kind, d.zone FROM decisions d JOIN jobs j ON j.id = d.job_id "
        "WHERE d.action = 'place'").fetchall())
    got = _values(fams["spotplane_placements"], "kind", "zone", suffix="_total")
    assert got == {k: float(v) for k, v in placed.items()}
    intents = run.store.intents("launch")
    done = Counter(i.payload["market"] for i in intents if i.status == "done")
    failed = [i for i in intents if i.status == "failed"]
    assert failed, "no launch was refused: the zones' spot capacity should refuse some"
    assert _values(fams["spotplane_launches"], "provider", "market", suffix="_total") == {
        ("sim", m): float(n) for m, n in done.items()}
    nodes = Counter()
    for i in intents:
        if i.status == "done":
            nodes[i.payload["market"]] += i.payload["count"]
    assert _values(fams["spotplane_launched_nodes"], "market", suffix="_total") == {
        (m,): float(n) for m, n in nodes.items()}
    assert _values(fams["spotplane_launch_failures"], "provider", "error", suffix="_total") == {
        ("sim", "CapacityUnavailable"): float(len(failed))}


def test_deadline_decisions_slack_and_checkpoints_match_the_store(run: Run) -> None:
    fams = _scrape(run.store)
    acts = Counter(run.db.execute("SELECT policy, action FROM decisions WHERE policy = "
                                  "'uniform_progress'").fetchall())
    assert acts and _values(fams["spotplane_deadline_decisions"], "policy", "action",
                            suffix="_total") == {k: float(v) for k, v in acts.items()}
    done = [j for j in run.store.list_jobs(kind="deadline", state=JobState.SUCCEEDED)]
    slack = [j.deadline_at - j.finished_at for j in done]  # type: ignore[operator]
    met, late = [s for s in slack if s >= 0], [-s for s in slack if s < 0]
    assert len(done) == 2 and met and late
    h = fams["spotplane_deadline_slack_at_finish_seconds"]
    assert _values(h, suffix="_count")[()] == len(met)
    assert _values(h, suffix="_sum")[()] == pytest.approx(sum(met))
    h = fams["spotplane_deadline_lateness_seconds"]
    assert _values(h, suffix="_count")[()] == len(late)
    assert _values(h, suffix="_sum")[()] == pytest.approx(sum(late))
    assert fams["spotplane_deadline_misses"].samples[0].value == len(late)
    written = run.db.execute("SELECT COUNT(*) FROM events WHERE src = 'CHECKPOINTING' AND "
                             "dst = 'RUNNING'").fetchone()[0]
    assert written == sum(j.checkpoints for j in run.store.list_jobs(limit=1000)) > 0
    assert _values(fams["spotplane_checkpoint_writes"], "source", suffix="_total") == {
        ("simulated",): float(written)}
    d = fams["spotplane_checkpoint_duration_seconds"]
    assert _values(d, suffix="_count")[()] == written
    assert _values(d, suffix="_sum")[()] == pytest.approx(written * 0.005 * HOUR)


def test_histograms_are_cumulative_and_count_every_tick(run: Run) -> None:
    fams = _scrape(run.store)
    tick = fams["spotplane_reconcile_tick_duration_seconds"]
    counts = _values(tick, "phase", suffix="_count")
    # each tick's timings are committed with the next tick's work (two controllers: two lost)
    assert set(counts.values()) == {float(run.ticks - 2)}
    assert {p for (p,) in counts} == {"ingest", "sync_fleet", "advance_jobs", "budgets", "policies",
                                      "place", "reap_idle", "persist_intents", "act",
                                      "persist", "total"}
    for fam in (tick, fams["spotplane_store_transaction_seconds"]):
        series: dict[tuple[tuple[str, str], ...], list[Sample]] = {}
        for s in fam.samples:
            if s.name.endswith("_bucket"):
                key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                series.setdefault(key, []).append(s)
        assert series
        for key, buckets in series.items():
            values = [b.value for b in sorted(buckets, key=lambda b: float(b.labels["le"]))]
            assert values == sorted(values) and buckets[-1].labels["le"] == "+Inf"
            total = _values(fam, *(k for k, _ in key), suffix="_count")[tuple(v for _, v in key)]
            assert values[-1] == total > 0


def test_gauges_match_the_store_rows(run: Run) -> None:
    fams = _scrape(run.store)
    jobs = Counter((j.state.value, j.kind.value) for j in run.store.list_jobs(limit=1000))
    assert _values(fams["spotplane_jobs"], "state", "kind") == {k: float(v) for k, v in jobs.items()}
    live = Counter((n.cloud, n.zone, n.market.value, n.accelerator, n.state.value)
                   for n in run.store.live_nodes())
    assert _values(fams["spotplane_nodes"], "cloud", "zone", "market", "accelerator",
                   "state") == {k: float(v) for k, v in live.items()}
    for c in run.store.cost_by_tenant():
        assert _values(fams["spotplane_tenant_spend_dollars"], "tenant", suffix="_total")[
            (c.tenant_name,)] == pytest.approx(c.cost)
        assert _values(fams["spotplane_tenant_on_demand_counterfactual_dollars"], "tenant",
                       suffix="_total")[(c.tenant_name,)] == pytest.approx(c.on_demand_cost)
    queue = run.mid["queue"]
    assert queue, "no job ever waited in the queue"
    scraped = run.mid["scrape"]
    assert _values(scraped["spotplane_queue_depth"], "pool", "kind", "tenant") == {
        k: float(n) for k, (n, _) in queue.items()}
    assert _values(scraped["spotplane_queue_oldest_wait_seconds"], "pool", "kind", "tenant") == {
        k: pytest.approx(w) for k, (_, w) in queue.items()}


def test_pool_quota_eta_and_forecast_families(tmp_path: Path) -> None:
    store = Store(tmp_path / "spotplane.db")
    acme, _ = store.create_tenant("acme", max_gpus=100)
    quota = QuotaAllocatorActor(str(tmp_path / "spotplane.db"), {"V100": 6, "H100": 2},
                                {"V100": 1, "H100": 8})
    quota.update({"V100": ([[2.0]], [[0.5]])}, now=0.0)
    store.commit(control_time=1.5 * HOUR, demand={acme.id: (3.0, 1.0)}, demand_at=1.5 * HOUR)
    store.put_forecasts([ForecastRow(tenant_id=acme.id, at=0.5 * HOUR, horizon_hours=4,
                                     mean=[1.0, 2.5, 3.0, 4.0], upper=[2.0, 3.5, 4.0, 5.0])])
    fams = _scrape(store)
    quotas = {q.accelerator: q for q in store.quotas()}
    assert _values(fams["spotplane_pool_spot_quota_gpus"], "pool", "accelerator") == {
        ("default", a): float(q.spot_quota_gpus) for a, q in quotas.items()}
    assert _values(fams["spotplane_pool_capacity_gpus"], "accelerator") == {
        ("V100",): 6.0, ("H100",): 16.0}
    assert _values(fams["spotplane_pool_eta"], "accelerator") == {
        (a,): e for a, e in quota.eta().items()}
    assert _values(fams["spotplane_pool_guarantee_hours"], "accelerator") == {
        ("V100",): 1.0, ("H100",): 1.0}
    assert _values(fams["spotplane_pool_guarantee_rate"], "accelerator")[("V100",)] == 0.9
    # hour 1 is the forecast's second hour; 3 GPU-hours in the first half hour = 6 GPUs
    assert _values(fams["spotplane_hp_demand_forecast_gpus"], "tenant") == {("acme",): 2.5}
    assert _values(fams["spotplane_hp_demand_forecast_upper_gpus"], "tenant") == {("acme",): 3.5}
    assert _values(fams["spotplane_hp_demand_realised_gpus"], "tenant") == {("acme",): 6.0}
    store.commit(control_time=2.0 * HOUR)  # on the boundary: the hour that just ended, whole
    fams = _scrape(store)
    assert _values(fams["spotplane_hp_demand_realised_gpus"], "tenant") == {("acme",): 3.0}
    assert _values(fams["spotplane_hp_demand_forecast_gpus"], "tenant") == {("acme",): 2.5}
    state = json.loads(store.get_meta("quota_allocators") or "{}")
    assert set(state) == {"V100", "H100"} and not math.isnan(state["V100"]["eta"])


def test_the_dashboard_is_grafana_json_whose_queries_name_exported_families(run: Run) -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "spotplane" and dash["schemaVersion"] >= 36
    assert [v["type"] for v in dash["templating"]["list"]] == ["datasource"]
    rows = [p for p in dash["panels"] if p["type"] == "row"]
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    assert len(rows) == 9 and len(panels) >= 2 * len(rows)
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
    api = ApiMetrics()
    api.record("/v1/jobs", "GET", 200, 0.01)
    text = exposition(build_registry(run.store, api)).decode()
    sampled = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    sampled |= {s.name for f in run.mid["scrape"].values() for s in f.samples}  # the queue
    for p in panels:
        assert p["type"] == "timeseries" and p["datasource"]["type"] == "prometheus", p["title"]
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]) and p["targets"], p["title"]
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])
        for t in p["targets"]:
            names = set(re.findall(r"spotplane_[a-z0-9_]+", t["expr"]))
            assert names and names <= sampled, (p["title"], names - sampled)


class ArtifactExecutor:
    """Runs entrypoint jobs as saves into a real artifact store: one checkpoint every poll
    (``size`` bytes), and after ``corrupt_after`` saves the newest is damaged and a replica
    restores past it. Reports what :func:`artifact_totals` reads back from the store."""

    def __init__(self, artifacts: LocalArtifactStore, clock: SimClock, size: int,
                 corrupt_after: int) -> None:
        self.artifacts, self.clock, self.size = artifacts, clock, size
        self.corrupt_after = corrupt_after

    def start(self, job: Job, nodes: Sequence[Node]) -> None:
        pass

    def stop(self, job: Job, reason: str) -> None:
        pass

    def notice(self, job: Job, seconds_left: float) -> None:
        pass

    def poll(self, jobs: Sequence[Job]) -> dict[str, ExecutorReport]:
        out = {}
        for j in jobs:
            n = len(self.artifacts.list(j.id))
            ref = self.artifacts.put(j.id, "r0", bytes([n % 256]) * self.size,
                                     progress=min(1.0, (n + 1) / 10), t=self.clock.now() + n)
            if n + 1 == self.corrupt_after and not self.artifacts.events(j.id):
                path = self.artifacts.path_of(ref.blob_key)
                path.write_bytes(b"x" + path.read_bytes()[1:])
                assert self.artifacts.restore_latest(j.id) is not None
            saved = len(self.artifacts.list(j.id))
            nbytes, fallbacks = artifact_totals(self.artifacts, j.id)
            out[j.id] = ExecutorReport(saved / 10, saved / 10, checkpoints=saved,
                                       finished=saved >= 10, checkpoint_bytes=nbytes,
                                       restore_fallbacks=fallbacks)
        return out


def test_executor_checkpoint_bytes_and_fallbacks_count_once_across_a_restart(
        tmp_path: Path, data_root: Path) -> None:
    clock = SimClock(start=0.0)
    store = Store(tmp_path / "spotplane.db")
    fleet = SimulatedFleet.from_options(clock=clock, data_dir=data_root, seed=1, gcp=False,
                                        state_path=tmp_path / "simfleet.db")
    artifacts = LocalArtifactStore(tmp_path / "artifacts", clock=clock)
    t, _ = store.create_tenant("t")
    job = store.submit_job(t.id, JobSpec(name="real", kind="hp", compute_hours=1.0,
                                         accelerator="V100", entrypoint="python train.py"),
                           now=0.0)

    def controller() -> Controller:
        return Controller(store, fleet, clock, ControllerSettings(pool_nodes={"V100": 2}),
                          executor=ArtifactExecutor(artifacts, clock, 1000, corrupt_after=4),
                          epoch=store.take_controller_lease())

    ctl = controller()
    while store.get_job(job.id).restore_fallbacks == 0:
        clock.advance(60.0)
        ctl.tick()
    before = store.get_job(job.id)
    # the 4th save was found corrupt in the poll that wrote it: 3 valid ones, 1 fallback
    assert before.state is JobState.RUNNING and before.checkpoint_bytes == 3000
    assert _scrape(store)["spotplane_checkpoint_bytes"].samples[0].value == 3000
    ctl = controller()  # a restart: the totals on the job keep it from counting them again
    for _ in range(30):
        clock.advance(60.0)
        ctl.tick()
    done = store.get_job(job.id)
    assert done.state is JobState.SUCCEEDED
    listed = artifacts.list(job.id)
    assert len(listed) == 10 and [e.kind for e in artifacts.events(job.id)] == ["corrupt",
                                                                               "fallback"]
    fams = _scrape(store)
    assert fams["spotplane_checkpoint_bytes"].samples[0].value == done.checkpoint_bytes == 10_000
    assert fams["spotplane_checkpoint_restore_fallbacks"].samples[0].value == 1
    assert _values(fams["spotplane_checkpoint_writes"], "source", suffix="_total") == {
        ("executor",): 10.0}


def test_a_launch_that_aborts_the_tick_is_still_counted(tmp_path: Path, data_root: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A cloud error other than a capacity refusal aborts the tick (its intent is retried), and
    the tick's counters roll back with it: the failure is counted on its own, once per try."""
    from controlplane.core.errors import CloudError

    clock = SimClock(start=0.0)
    store = Store(tmp_path / "spotplane.db")
    fleet = SimulatedFleet.from_options(clock=clock, data_dir=data_root, seed=5,
                                        state_path=tmp_path / "simfleet.db",
                                        lifetime_model=default_gce_model())
    ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes=POOLS),
                     epoch=store.take_controller_lease())
    tenant, _ = store.create_tenant("t")
    store.submit_jobs(tenant.id, [JobSpec(name="j", compute_hours=1.0, accelerator="V100")])

    def broken(req: Any) -> Any:
        raise CloudError("the provider's API answered 503")

    monkeypatch.setattr(fleet, "launch", broken)
    raised = 0
    for _ in range(10):  # the job is queued, then placed: from then on every tick tries
        try:
            ctl.tick()
        except CloudError as exc:
            assert "503" in str(exc)
            raised += 1
        clock.advance(60.0)
    assert raised >= 1
    fams = _scrape(store)
    failures = _values(fams["spotplane_launch_failures"], "provider", "error", suffix="_total")
    assert failures == {(fleet.name, "CloudError"): float(raised)}
