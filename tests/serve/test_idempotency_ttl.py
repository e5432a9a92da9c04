"""Idempotency-Keys expire: an answer replays for ``Caps.idempotency_ttl_s`` of wall time, then is
pruned and the key creates anew. The service runs on a real SQLite store with a stepped clock in
place of wall time (no sleeps)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from controlplane.core.clock import SimClock
from controlplane.core.models import Bag, BagSpec, Job, JobSpec
from controlplane.store import Store
from serve.service import Caps, ControlPlaneService, Principal

TTL = 24 * 3600.0


def _render(bag: Bag | None, jobs: Sequence[Job]) -> str:
    return json.dumps({"bag": bag.id if bag else None, "jobs": [j.id for j in jobs]})


@pytest.fixture
def setup(store_url: str) -> tuple[ControlPlaneService, SimClock, Principal]:
    """The service on each backend (``store_url``: SQLite, then PostgreSQL)."""
    clock = SimClock(start=1_700_000_000.0)
    service = ControlPlaneService(Store(store_url), "admin-hash", Caps(), clock)
    tenant = service.store.create_tenant("acme")[0]
    return service, clock, Principal.tenant(tenant.id)


def _keys(service: ControlPlaneService) -> int:
    return int(service.store._q("SELECT COUNT(*) FROM idempotency")[0][0])


def test_default_ttl_is_24_hours() -> None:
    assert Caps().idempotency_ttl_s == TTL


def test_a_retry_within_the_ttl_replays_and_after_it_creates_anew(setup) -> None:  # type: ignore[no-untyped-def]
    service, clock, acme = setup
    spec = JobSpec(name="train", kind="spot", compute_hours=1.0)
    first = service.submit_job_once(acme, spec, "k-1", _render)
    assert not first.replayed
    clock.advance(TTL - 1.0)  # one second before the key expires: a replay, nothing created
    again = service.submit_job_once(acme, spec, "k-1", _render)
    assert again.replayed and again.body == first.body
    assert len(service.store.list_jobs(acme.tenant_id)) == 1
    clock.advance(1.0)  # exactly the TTL after the first answer: expired
    fresh = service.submit_job_once(acme, spec, "k-1", _render)
    assert not fresh.replayed and fresh.body != first.body
    assert len(service.store.list_jobs(acme.tenant_id)) == 2
    # the new answer replays in its turn, for its own TTL
    clock.advance(TTL / 2)
    assert service.submit_job_once(acme, spec, "k-1", _render).body == fresh.body
    assert _keys(service) == 1


def test_an_expired_key_may_carry_another_body_and_old_keys_are_pruned(setup) -> None:  # type: ignore[no-untyped-def]
    service, clock, acme = setup
    for i in range(5):
        service.submit_job_once(acme, JobSpec(name=f"j{i}", compute_hours=1.0), f"old-{i}", _render)
    bag = BagSpec(name="sweep", template=JobSpec(name="t", compute_hours=1.0), params=[{}, {}])
    service.submit_bag_once(acme, bag, "bag-1", _render)
    assert _keys(service) == 6
    clock.advance(TTL + 60.0)
    # reused for a different request after expiry: not the 422 of a live key, a new job
    other = service.submit_job_once(acme, JobSpec(name="other", compute_hours=2.0), "old-0", _render)
    assert not other.replayed
    assert _keys(service) == 1  # the write pruned every expired key, whatever its tenant
    again = service.submit_bag_once(acme, bag, "bag-1", _render)
    assert not again.replayed and len(service.store.list_bags(acme.tenant_id)) == 2
    assert service.store.prune_idempotency(clock.now() + 1.0) == 2
