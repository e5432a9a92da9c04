"""Cursor pages read in SQL, on both backends: tenants, bags, a job's events and decisions, and
fleet nodes (a tenant's only, live only), each item once in order, a foreign cursor refused."""

from __future__ import annotations

import pytest

from controlplane.core.errors import UnknownReference
from controlplane.core.models import BagSpec, Decision, Event, JobSpec, Market, Node, NodeState
from controlplane.store import Store


def _pages(fetch, limit: int) -> list[str]:  # type: ignore[no-untyped-def]
    """Every id by following pages of ``limit`` (``fetch(after, limit)`` returns items with ids)."""
    seen: list[str] = []
    after = None
    while True:
        page = fetch(after, limit)
        assert len(page) <= limit
        seen += [str(x.id) for x in page]
        if len(page) < limit:
            return seen
        after = str(page[-1].id)


def _node(i: int, tenant: str | None, state: NodeState) -> Node:
    return Node(id=f"n-{i:03d}", provider="sim", cloud="gcp", zone="us-a", instance_type="a2",
                accelerator="A100", accelerator_count=1, market=Market.SPOT, price_per_hour=1.0,
                on_demand_price_per_hour=3.0, state=state, intent_id=f"i-{i}", tenant_id=tenant,
                requested_at=float(i))


def test_every_list_pages_in_sql_each_item_once(store_url: str) -> None:
    st = Store(store_url)
    tenants = [st.create_tenant(f"t{i}", max_gpus=4)[0] for i in range(5)]
    every_tenant = [t.id for t in st.list_tenants()]
    assert sorted(every_tenant) == sorted(t.id for t in tenants)
    assert _pages(lambda a, n: st.list_tenants(after=a, limit=n), 2) == every_tenant
    a, b = tenants[0].id, tenants[1].id
    bags = [st.create_bag(a if i % 3 else b, BagSpec(name=f"bag{i}", template=JobSpec(
        name="t", compute_hours=1.0), params=[{}]), now=float(i % 2))[0] for i in range(7)]
    mine = [g.id for g in sorted(bags, key=lambda g: (g.created_at, g.id)) if g.tenant_id == a]
    assert _pages(lambda x, n: st.list_bags(a, after=x, limit=n), 2) == mine
    with pytest.raises(UnknownReference, match="after"):  # another tenant's bag is no cursor here
        st.list_bags(a, after=next(g.id for g in bags if g.tenant_id == b))
    job = st.submit_job(a, JobSpec(name="j", compute_hours=1.0))
    st.commit(events=[Event(at=float(k), tenant_id=a, job_id=job.id, kind="note", cause=f"e{k}")
                      for k in range(5)],
              decisions=[Decision(at=float(k), job_id=job.id, tenant_id=a, policy="p",
                                  action="wait", reason=f"d{k}", observation={}) for k in range(5)])
    events = st.job_events(job.id)
    assert _pages(lambda x, n: st.job_events(job.id, after=x, limit=n), 2) == [str(e.id) for e in events]
    decisions = st.job_decisions(job.id)
    assert _pages(lambda x, n: st.job_decisions(job.id, after=x, limit=n), 3) == [
        str(d.id) for d in decisions]
    for bad in ("nope", "99999999", "1" * 30):
        with pytest.raises(UnknownReference, match="after"):
            st.job_events(job.id, after=bad)
    gone = (NodeState.TERMINATED, NodeState.PREEMPTED)
    st.commit(nodes=[_node(i, a if i % 2 else b, gone[i % 2] if i % 3 == 0 else NodeState.READY)
                     for i in range(9)])
    every = [n.id for n in st.list_nodes()]
    assert _pages(lambda x, n: st.node_page(after=x, limit=n), 4) == every
    ours = [n.id for n in st.list_nodes() if n.tenant_id == a]
    assert _pages(lambda x, n: st.node_page(tenant_id=a, after=x, limit=n), 2) == ours
    live = [n.id for n in st.list_nodes(live_only=True) if n.tenant_id == a]
    assert live and live != ours
    assert _pages(lambda x, n: st.node_page(tenant_id=a, live_only=True, after=x, limit=n), 1) == live
    with pytest.raises(UnknownReference, match="after"):
        st.node_page(tenant_id=a, after=next(n.id for n in st.list_nodes() if n.tenant_id == b))
    st.close()


@pytest.mark.parametrize("order_by", ["cost", "slack", "name", "submitted"])
@pytest.mark.parametrize("descending", [False, True])
def test_the_job_table_pages_by_cursor_in_any_order(store_url: str, order_by: str,
                                                     descending: bool) -> None:
    """Past the cursor in the page's own order, ties and nulls (slack of jobs without a
    deadline) included: the pages are the one sorted page, each job once."""
    st = Store(store_url)
    t, _ = st.create_tenant("t", max_gpus=4)
    for i in range(11):
        kind = {"kind": "deadline", "deadline_hours": 5.0 + i % 3} if i % 2 else {}
        job = st.submit_job(t.id, JobSpec(name=f"j{i % 4}", compute_hours=1.0, **kind), now=0.0)
        job.cost = float(i % 3)  # ties, broken by submission order
        st.commit(jobs=[job])
    page = dict(order_by=order_by, descending=descending, now=100.0)
    _, whole = st.job_page(t.id, limit=100, **page)  # type: ignore[arg-type]
    seen = _pages(lambda a, n: st.job_page(t.id, limit=n, after=a, **page)[1], 3)  # type: ignore[arg-type]
    assert seen == [j.id for j in whole] and len(seen) == 11
