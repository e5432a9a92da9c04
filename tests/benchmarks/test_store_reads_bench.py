"""benchmarks.store_reads' bulk load, on both backends: exactly the rows asked for, spread over
the tenants in submission order, QUEUED, each a job that loads, and counted by the totals."""

from __future__ import annotations

from benchmarks.store_reads import load_jobs
from controlplane.core.models import JobState
from controlplane.store import Store


def test_the_bulk_load_writes_loadable_jobs_round_robin(store_url: str) -> None:
    st = Store(store_url)
    tenants = [st.create_tenant(f"r{i}")[0].id for i in range(3)]
    assert load_jobs(st, tenants, 2_000) > 0
    assert st.metrics()['jobs{state="QUEUED"}'] == 2_000.0
    page = st.list_jobs(tenants[1], limit=5)
    assert [j.id for j in page] == [f"job-r{i:09d}" for i in (1, 4, 7, 10, 13)]
    assert all(j.tenant_id == tenants[1] and j.state is JobState.QUEUED for j in page)
    assert st.get_job("job-r000001999", tenants[1]).name == "sweep"  # 1999 % 3 == 1
