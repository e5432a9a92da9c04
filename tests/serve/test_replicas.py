"""The API on two Serve replicas (real local Ray and HTTP): an Idempotency-Key creates one job
whichever replica answers, the replicas take a tenant's requests from one rate bucket in the store, and a submit waiting on
the store does not hold up a cheap request (handlers run off the event loop, each thread on its own connection)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from ray import serve

from controlplane.store import Store
from serve.limits import ApiLimits
from tests.support import free_port

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ADMIN = "spa_test-admin-token"
HOLD_S = 10.0  # how long the test holds the store's write lock (a probe stalled behind it takes ~HOLD_S)
RATE, BURST = 4.0, 20  # a tenant's budget over every replica


@dataclass
class Api:
    url: str
    store: Store
    token: str
    tenant_id: str

    def client(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60,
                            headers={"Authorization": f"Bearer {token or self.token}"})


@pytest.fixture(scope="module")
def api(ray_cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:  # type: ignore[no-untyped-def]
    from serve.app import start_api, stop_api

    db = Path(tmp_path_factory.mktemp("replicas")) / "spotplane.db"
    store = Store(db)
    limits = ApiLimits(rate_per_s=RATE, burst=BURST, max_in_flight_per_tenant=8)  # 8 at once below
    url = start_api(db, ADMIN, free_port(), limits=limits, replicas=2)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30) as admin:
        r = admin.post("/v1/tenants", json={"name": "acme", "max_gpus": 16})
        assert r.status_code == 201, r.text
    try:
        yield Api(url, store, r.json()["token"], r.json()["tenant"]["id"])
    finally:
        stop_api()
        store.close()


def test_two_replicas_run(api: Api) -> None:
    deployment = serve.status().applications["spotplane"].deployments["SpotplaneAPI"]
    assert deployment.replica_states.get("RUNNING") == 2, deployment.replica_states


def test_one_idempotency_key_makes_one_job_across_replicas(api: Api) -> None:
    spec = {"name": "once", "kind": "spot", "compute_hours": 1.0}
    with api.client() as c:
        def post(_: int) -> httpx.Response:
            return c.post("/v1/jobs", json=spec, headers={"Idempotency-Key": "k-replicas-1"})

        with ThreadPoolExecutor(8) as pool:  # at once: both replicas race on the key
            answers = list(pool.map(post, range(8)))
    assert all(a.status_code == 201 for a in answers), [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
    assert sum(a.headers.get("Idempotent-Replayed") == "true" for a in answers) == 7
    assert [j.spec.name for j in api.store.list_jobs(api.tenant_id)].count("once") == 1


def test_the_rate_budget_is_shared_by_the_replicas(api: Api) -> None:
    time.sleep(BURST / RATE)  # the buckets are full again after the idempotency test
    with api.client() as c:
        t0 = time.monotonic()
        codes: list[int] = []
        while 429 not in codes and len(codes) < 10 * BURST:  # a slow answer only means more sends
            codes.append(c.get("/v1/tenants/me").status_code)
        took = time.monotonic() - t0
    # the replicas share one bucket in the store: the tenant gets BURST + RATE x took in all,
    # where a full budget per replica would let about 2 x BURST through before the first 429
    allowed = BURST + RATE * took
    assert codes.count(200) <= allowed + 1, (codes.count(200), allowed)
    assert codes.count(429) > 0


def test_healthz_answers_while_a_write_waits_on_the_store(api: Api) -> None:
    """A submit that waits HOLD_S on SQLite's write lock (held here) must not stall /healthz."""
    blocker = sqlite3.connect(str(api.store.path), isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    posted: list[tuple[int, float]] = []  # (status, when it answered)
    sending = threading.Event()

    def submit() -> None:
        with api.client(ADMIN) as c:  # the admin: no rate budget in the way
            sending.set()
            r = c.post("/v1/jobs", json={"name": "waits", "kind": "spot", "compute_hours": 1.0},
                       params={"tenant_id": api.tenant_id})
            posted.append((r.status_code, time.monotonic()))

    probes: list[float] = []
    poster = threading.Thread(target=submit)
    try:
        with httpx.Client(base_url=api.url, timeout=HOLD_S) as anon:  # stalled: ReadTimeout
            anon.get("/healthz")
            poster.start()
            assert sending.wait(30), "the submit never started"
            t0 = time.monotonic()
            while time.monotonic() - t0 < HOLD_S:
                p0 = time.monotonic()
                assert anon.get("/healthz").status_code == 200
                probes.append(time.monotonic() - p0)
            assert poster.is_alive()  # the submit still waits on the lock
    finally:
        released = time.monotonic()
        blocker.execute("ROLLBACK")
        blocker.close()
    poster.join(30)
    assert posted and posted[0][0] == 201 and posted[0][1] >= released, (posted, released)
    assert len(probes) >= 4 and max(probes) < HOLD_S / 2, (len(probes), max(probes))
