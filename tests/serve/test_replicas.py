"""The API on two Serve replicas (real local Ray and HTTP): an Idempotency-Key creates one job
whichever replica answers, the rate budget is split between the replicas, and a slow list does
not hold up a cheap request (handlers run off the event loop, each thread on its own connection)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from ray import serve

from controlplane.core.models import JobSpec
from controlplane.store import Store
from serve.limits import ApiLimits
from tests.support import free_port

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ADMIN = "spa_test-admin-token"
BIG = 10_000  # jobs in the list that is slow to answer
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
    limits = ApiLimits(rate_per_s=RATE, burst=BURST)
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
        codes = [c.get("/v1/tenants/me").status_code for _ in range(2 * BURST)]
        took = time.monotonic() - t0
    # each replica holds BURST/2 and refills RATE/2 a second: the tenant gets about BURST + RATE
    # x took in all, where a full budget per replica would let all 2 x BURST through
    allowed = BURST + RATE * took
    assert codes.count(200) <= allowed + 1, (codes.count(200), allowed)
    assert codes.count(429) > 0


def test_healthz_answers_while_a_big_list_is_in_flight(api: Api) -> None:
    api.store.submit_jobs(api.tenant_id, [JobSpec(name=f"b{i}", kind="spot", compute_hours=1.0)
                                          for i in range(BIG)])
    done = threading.Event()
    span: list[float] = []

    def big_lists() -> None:
        with httpx.Client(base_url=api.url, timeout=120, headers={"Authorization": f"Bearer {ADMIN}"}) as c:
            t0 = time.monotonic()
            for _ in range(3):
                assert c.get("/v1/jobs", params={"limit": BIG}).status_code == 200
            span.extend([t0, time.monotonic()])
        done.set()

    probes: list[tuple[float, float]] = []
    lister = threading.Thread(target=big_lists)
    with httpx.Client(base_url=api.url, timeout=60) as anon:
        anon.get("/healthz")
        lister.start()
        while not done.is_set():
            t0 = time.monotonic()
            assert anon.get("/healthz").status_code == 200
            probes.append((t0, time.monotonic()))
    lister.join()
    listing = span[1] - span[0]
    inside = [b - a for a, b in probes if a >= span[0] and b <= span[1]]
    assert listing > 0.3, f"the lists took only {listing:.3f} s: too fast to show anything"
    assert len(inside) >= 5, (len(inside), listing)
    assert max(inside) < listing / 3, f"a /healthz took {max(inside):.3f} s of {listing:.3f} s of lists"
