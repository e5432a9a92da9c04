"""The spot queueing time the quota allocator feeds into GFS Eq. 11, measured from the events."""

from __future__ import annotations

from controlplane.core.models import Event, Job, JobSpec, JobState
from controlplane.store import Store


def _move(st: Store, job: Job, dst: JobState, at: float) -> None:
    src = job.state
    job.state = dst
    st.commit(jobs=[job], events=[Event(at=at, tenant_id=job.tenant_id, job_id=job.id,
                                        kind="transition", src=src.value, dst=dst.value, cause="test")])


def test_max_spot_queue_seconds_over_the_window(store_url: str) -> None:
    st = Store(store_url)
    t, _ = st.create_tenant("q")
    early, late, waiting = (st.submit_job(t.id, JobSpec(name=n, compute_hours=1), now=0.0)
                            for n in ("early", "late", "waiting"))
    hp = st.submit_job(t.id, JobSpec(name="hp", kind="hp", compute_hours=1), now=0.0)
    assert st.max_spot_queue_seconds(now=0.0, window_seconds=3600) == 0.0
    _move(st, early, JobState.QUEUED, 0.0)
    _move(st, early, JobState.STARTING, 5000.0)   # waited 5000 s, ended long before the window
    _move(st, late, JobState.QUEUED, 8000.0)
    _move(st, late, JobState.STARTING, 9000.0)    # waited 1000 s, ended inside the window
    _move(st, waiting, JobState.QUEUED, 9500.0)   # still waiting at now=10000: 500 s so far
    _move(st, hp, JobState.QUEUED, 0.0)           # an HP job's wait is not a spot wait
    assert st.max_spot_queue_seconds(now=10_000.0, window_seconds=3600) == 1000.0
    assert st.max_spot_queue_seconds(now=10_000.0, window_seconds=20_000) == 5000.0
    assert st.max_spot_queue_seconds(now=12_000.0, window_seconds=1000) == 2500.0  # ongoing only
