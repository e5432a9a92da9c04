"""The API's limits on a real Serve server started with tight ones: the per-tenant request rate
(429 + Retry-After, other tenants unaffected), unfinished jobs per tenant, bag size, body size and
list bytes; and the token bucket itself (no Ray)."""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from controlplane.client import SpotplaneClient
from controlplane.core.models import JobSpec
from controlplane.store import Store
from serve.limits import ApiLimits, TokenBuckets, retry_after_header
from tests.support import free_port

ADMIN = "spa_limits-admin-token"
TIGHT = ApiLimits(max_body_bytes=4096, rate_per_s=0.05, burst=8, max_jobs_in_flight=3, max_bag_jobs=3,
                  max_list_bytes=8192, max_package_bytes=8192)


@dataclass
class Limited:
    url: str
    store: Store
    tokens: dict[str, str]
    ids: dict[str, str]

    def client(self, tenant: str) -> httpx.Client:
        token = ADMIN if tenant == "admin" else self.tokens[tenant]
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


@pytest.fixture(scope="module")
def limited(ray_cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Limited]:  # type: ignore[no-untyped-def]
    from serve.app import start_api, stop_api

    db = Path(tmp_path_factory.mktemp("limits")) / "spotplane.db"
    store = Store(db)
    tokens, ids = {}, {}
    for name in ("rate", "calm", "flight", "bags", "lister", "big"):
        tenant, tokens[name] = store.create_tenant(name, max_gpus=8)
        ids[name] = tenant.id
    url = start_api(db, ADMIN, free_port(), limits=TIGHT)
    try:
        yield Limited(url, store, tokens, ids)
    finally:
        stop_api()
        store.close()




@pytest.mark.ray
@pytest.mark.slow
def test_request_rate_is_per_tenant_with_retry_after(limited: Limited) -> None:
    with limited.client("rate") as rate, limited.client("calm") as calm, limited.client("admin") as admin:
        codes = [rate.get("/v1/clock").status_code for _ in range(10)]
        # burst 8 at 0.05/s: eight pass, then 429 until a token refills (20 s)
        assert codes[:8] == [200] * 8 and codes[8:] == [429, 429], codes
        r = rate.get("/v1/tenants/me")
        assert r.status_code == 429
        assert 1 <= int(r.headers["retry-after"]) <= 20
        assert r.json()["message"] == "more than 0.05 requests/s (burst 8)"
        assert r.json()["fix"] == "slow down and retry after the Retry-After seconds"
        # another tenant and the admin are not slowed down by it
        assert calm.get("/v1/tenants/me").status_code == 200
        assert all(admin.get("/v1/clock").status_code == 200 for _ in range(8))


@pytest.mark.ray
@pytest.mark.slow
def test_unfinished_jobs_and_bag_size_are_capped(limited: Limited) -> None:
    body = {"name": "f", "compute_hours": 1.0}
    with limited.client("flight") as flight, limited.client("bags") as bags:
        assert [flight.post("/v1/jobs", json=body).status_code for _ in range(3)] == [201] * 3
        r = flight.post("/v1/jobs", json=body)
        assert r.status_code == 429
        assert r.headers["retry-after"] == "60"
        assert r.json()["message"] == "tenant flight has 3 unfinished jobs; 1 more would pass the cap of 3"
        # a retry under an Idempotency-Key is refused the same way and creates nothing
        assert flight.post("/v1/jobs", json=body, headers={"Idempotency-Key": "cap"}).status_code == 429
        assert len(limited.store.list_jobs(limited.ids["flight"])) == 3

        bag = {"name": "b", "template": {"name": "t", "compute_hours": 1.0}, "params": [{}] * 4}
        r = bags.post("/v1/bags", json=bag)
        assert r.status_code == 403
        assert r.json() == {"message": "params: 4 parameter sets is more than this API's bag cap "
                                       "of 3", "fix": "split the sweep into several bags",
                            "errors": []}
        assert bags.post("/v1/bags", json={**bag, "params": [{}] * 3}).status_code == 201
        r = bags.post("/v1/jobs", json=body)  # the bag's 3 jobs fill the tenant's cap
        assert r.status_code == 429


@pytest.mark.ray
@pytest.mark.slow
def test_body_cap_and_list_byte_cap(limited: Limited) -> None:
    with limited.client("big") as big:
        r = big.post("/v1/jobs", json={"name": "x", "compute_hours": 1.0, "params": {"p": "x" * 5000}})
        assert r.status_code == 413
        assert r.json()["message"] == "request body is larger than 4096 bytes"
        # a code package has its own cap: over the body cap, under the package cap
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
            z.writestr("weights.bin", os.urandom(6000))
        r = big.put("/v1/packages/_ray_pkg_0000000000000001.zip", content=buf.getvalue())
        assert r.status_code == 200, r.text
        r = big.put("/v1/packages/_ray_pkg_0000000000000002.zip", content=b"x" * 9000)
        assert r.status_code == 413 and r.json()["message"] == "request body is larger than 8192 bytes"
    # 40 jobs of ~1 KB each: more than one 8 KiB answer; pages follow X-Spotplane-Next-Offset
    limited.store.submit_jobs(limited.ids["lister"], [JobSpec(name=f"l{i}", compute_hours=1.0,
                                                              params={"pad": "p" * 600}) for i in range(40)])
    with limited.client("admin") as admin:
        seen: list[str] = []
        offset, pages = 0, 0
        while True:
            r = admin.get("/v1/jobs", params={"tenant_id": limited.ids["lister"], "offset": offset})
            assert r.status_code == 200 and len(r.content) <= 8192
            seen += [j["name"] for j in r.json()]
            pages += 1
            if "x-spotplane-next-offset" not in r.headers:
                break
            assert r.headers["x-spotplane-truncated"] == "true"
            offset = int(r.headers["x-spotplane-next-offset"])
        assert seen == [f"l{i}" for i in range(40)] and pages >= 5
    with SpotplaneClient(limited.url, ADMIN) as client:  # the CLI's client follows the pages
        assert [j["name"] for j in client.jobs(tenant_id=limited.ids["lister"])] == seen
        assert [j["name"] for j in client.jobs(tenant_id=limited.ids["lister"], limit=25)] == seen[:25]


def test_token_bucket_refills_at_its_rate() -> None:
    b = TokenBuckets(rate=2.0, burst=3)
    assert [b.take("a", now=0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take("a", now=0.0) == pytest.approx(0.5)  # one token refills in 1/rate s
    assert b.take("b", now=0.0) == 0.0  # per key
    assert b.take("a", now=0.5) == 0.0
    assert b.take("a", now=0.5) == pytest.approx(0.5)
    assert b.take("a", now=100.0) == 0.0  # capped at the burst, not 200 tokens
    assert [b.take("a", now=100.0) for _ in range(3)] == [0.0, 0.0, pytest.approx(0.5)]
    assert retry_after_header(0.01) == "1" and retry_after_header(2.2) == "3"
