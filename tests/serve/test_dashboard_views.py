"""The dashboard's read-only views over a real SQLite store (no Ray): the jobs page's sorting,
filtering, paging and tenant scope; the overview's node history; a job's timeline segments."""

from __future__ import annotations

import pytest

from controlplane.core.models import Event, JobSpec, JobState, Market, Node, NodeState
from controlplane.core.readmodels import CapacityPoint
from controlplane.core.units import HOUR
from controlplane.store import Store
from serve.dashboard import JobRow, node_history, segments
from serve.service import ControlPlaneService, Principal


@pytest.fixture
def service(store_url: str) -> ControlPlaneService:
    """The service on each backend (``store_url``: SQLite, then PostgreSQL)."""
    return ControlPlaneService(Store(store_url), "admin-hash")


def _fill(service: ControlPlaneService) -> tuple[str, str, list[str]]:
    store = service.store
    acme = store.create_tenant("acme")[0].id
    beta = store.create_tenant("beta")[0].id
    jobs = store.submit_jobs(acme, [JobSpec(name=f"train-{i}", kind="spot", compute_hours=4.0) for i in range(5)],
                             now=0.0)
    dl = store.submit_job(acme, JobSpec(name="finetune", kind="deadline", compute_hours=4.0, deadline_hours=10.0),
                          now=0.0)
    store.submit_job(beta, JobSpec(name="sweep", kind="spot", compute_hours=1.0), now=0.0)
    for i, job in enumerate(jobs):  # cost 0, 10, 20, 30, 40; progress 0/4 .. 4/4
        job.cost, job.progress_hours, job.preemptions = 10.0 * i, float(i), 4 - i
        job.state = JobState.RUNNING if i < 4 else JobState.SUCCEEDED
    dl.progress_hours, dl.state = 1.0, JobState.RUNNING
    store.commit(jobs=[*jobs, dl], control_time=2 * HOUR)
    return acme, beta, [j.id for j in jobs] + [dl.id]


def test_job_page_sorts_filters_pages_and_scopes(service: ControlPlaneService) -> None:
    acme, beta, ids = _fill(service)
    admin, a, b = Principal.admin(), Principal.tenant(acme), Principal.tenant(beta)
    total, page = service.job_page(admin, limit=3)
    assert total == 7 and [j.name for j in page] == ["train-0", "train-1", "train-2"]
    total, page = service.job_page(a, order_by="cost", descending=True, limit=2, offset=1)
    assert total == 6 and [j.cost for j in page] == [30.0, 20.0]
    total, page = service.job_page(a, order_by="progress", descending=True, limit=1)
    assert page[0].id == ids[4]  # 4/4 done
    total, page = service.job_page(a, states=[JobState.SUCCEEDED])
    assert total == 1 and page[0].id == ids[4]
    total, page = service.job_page(a, text="fine")
    assert total == 1 and page[0].id == ids[5]
    # slack sorts deadline jobs first (ascending), jobs without one after
    total, page = service.job_page(a, order_by="slack", limit=1)
    assert page[0].id == ids[5]
    row = JobRow.of(page[0], now=2 * HOUR)  # 8 h to the deadline, 3 h of work left
    assert row.slack_hours == 5.0 and row.progress_fraction == 0.25
    # a tenant never pages another tenant's jobs, even when asking for them
    assert service.job_page(b, tenant_id=acme) == (0, [])
    total, page = service.job_page(b)
    assert total == 1 and page[0].name == "sweep"
    assert service.job_counts(a)["RUNNING"] == 5 and service.job_counts(b)["PENDING"] == 1
    assert sum(service.job_counts(admin).values()) == 7


def _node(i: int, ready: float | None, ended: float | None, market: Market = Market.SPOT,
          requested: float = 0.0) -> Node:
    return Node(id=f"n{i}", provider="sim", cloud="aws", zone="us-east-1a", instance_type="p3.2xlarge",
                accelerator="V100", accelerator_count=1, market=market, price_per_hour=1.0,
                on_demand_price_per_hour=3.0, state=NodeState.READY if ended is None else NodeState.PREEMPTED,
                intent_id="i", requested_at=requested, ready_at=ready, ended_at=ended)


def test_node_history_counts_live_nodes_per_cloud_and_market() -> None:
    nodes = [_node(0, 0.0, 50.0), _node(1, 0.0, None), _node(2, 60.0, None, Market.ON_DEMAND), _node(3, None, None)]
    hist = node_history(nodes, now=100.0, points=3)
    assert hist.times == [0.0, 50.0, 100.0]
    assert hist.series == {"aws/on_demand": [0, 0, 1], "aws/spot": [2, 2, 1]}
    assert node_history([], now=5.0).series == {}


def test_segments_cut_a_job_into_states_with_its_nodes() -> None:
    node, gone = _node(7, 20.0, None, requested=12.0), _node(8, 1.0, 5.0)  # n8: an earlier attempt
    events = [Event(at=0.0, job_id="j", kind="transition", src="PENDING", dst="QUEUED", cause="accepted"),
              Event(at=10.0, job_id="j", kind="transition", src="QUEUED", dst="STARTING", cause="placed"),
              Event(at=12.0, job_id="j", node_id="n7", kind="node", dst="requested", cause="launch"),
              Event(at=30.0, job_id="j", kind="transition", src="STARTING", dst="RUNNING", cause="ready")]
    segs = segments(events, {"n7": node, "n8": gone}, end=90.0)
    assert [(s.state, s.start, s.end) for s in segs] == [("QUEUED", 0.0, 10.0), ("STARTING", 10.0, 30.0),
                                                          ("RUNNING", 30.0, 90.0)]
    assert segs[1].node_ids == ["n7"] and segs[1].zone == "us-east-1a" and segs[1].market == "spot"
    assert segs[2].node_ids == ["n7"]  # still held while running
    assert segs[0].node_ids == [] and segs[0].zone is None  # queued: no nodes


def test_capacity_history_hides_the_summed_hp_demand_from_tenants(service: ControlPlaneService) -> None:
    acme = service.store.create_tenant("acme")[0].id
    service.store.add_capacity([CapacityPoint(at=300.0 * i, pool="default", accelerator="V100", capacity_gpus=10,
                                              spot_quota_gpus=i, hp_demand_gpus=2.0, hp_demand_upper_gpus=3.5,
                                              guarantee_hours=1, eta=0.5) for i in range(3)])
    full = service.capacity_history(Principal.admin(), accelerator=None, after=None, limit=10)
    assert [(p.spot_quota_gpus, p.hp_demand_gpus, p.hp_demand_upper_gpus) for p in full] == [
        (0, 2.0, 3.5), (1, 2.0, 3.5), (2, 2.0, 3.5)]
    theirs = service.capacity_history(Principal.tenant(acme), accelerator="V100", after=full[0].id, limit=10)
    assert [(p.spot_quota_gpus, p.hp_demand_gpus, p.hp_demand_upper_gpus, p.eta, p.guarantee_hours)
            for p in theirs] == [(1, None, None, 0.5, 1), (2, None, None, 0.5, 1)]
