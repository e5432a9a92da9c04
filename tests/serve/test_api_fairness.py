"""One tenant's requests in flight are bounded per replica: on a real Serve server, a tenant
holding its limit of slow uploads gets 429 (Retry-After, the limit named) for more, while
another tenant and the admin are served; and the counter itself (no Ray)."""

from __future__ import annotations

import asyncio
import io
import select
import socket
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from controlplane.core.errors import RateLimited
from serve.fairness import InFlight
from serve.limits import ApiLimits
from tests.support import free_port, wait_until

ADMIN = "spa_fairness-admin-token"
LIMIT = 2
EXTRA = 3


@dataclass
class Served:
    url: str
    tokens: dict[str, str]

    def client(self, tenant: str) -> httpx.Client:
        token = ADMIN if tenant == "admin" else self.tokens[tenant]
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


@pytest.fixture(scope="module")
def served(ray_cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:  # type: ignore[no-untyped-def]
    from controlplane.store import Store
    from serve.app import start_api, stop_api

    db = Path(tmp_path_factory.mktemp("fairness")) / "spotplane.db"
    store = Store(db)
    tokens = {name: store.create_tenant(name, max_gpus=8)[1] for name in ("flood", "calm")}
    url = start_api(db, ADMIN, free_port(), limits=ApiLimits(max_in_flight_per_tenant=LIMIT))
    try:
        yield Served(url, tokens)
    finally:
        stop_api()
        store.close()


def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("train.py", "print('hi')\n" * 50)
    return buf.getvalue()


def _start_upload(url: str, token: str, name: str, body: bytes) -> socket.socket:
    """A PUT of ``body`` whose headers and first bytes are sent, the rest held back."""
    parsed = httpx.URL(url)
    sock = socket.create_connection((parsed.host, parsed.port or 80), timeout=30)
    sock.sendall((f"PUT /v1/packages/{name} HTTP/1.1\r\nHost: {parsed.host}\r\n"
                  f"Authorization: Bearer {token}\r\nContent-Type: application/zip\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n").encode() + body[:16])
    return sock


def _answered(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and body of the one response on ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    while len(rest) < int(headers.get("content-length", "0")):
        rest += sock.recv(65536)
    return int(lines[0].split()[1]), headers, rest


@pytest.mark.ray
@pytest.mark.slow
def test_a_tenant_past_its_requests_in_flight_gets_429_and_others_are_served(served: Served) -> None:
    body = _zip()
    socks = [_start_upload(served.url, served.tokens["flood"], f"_ray_pkg_{i:016x}.zip", body)
             for i in range(LIMIT + EXTRA)]
    try:
        wait_until(lambda: sum(_answered(s) for s in socks) >= EXTRA, 60,
                   f"{EXTRA} of the {LIMIT + EXTRA} uploads to be refused")
        refused = [s for s in socks if _answered(s)]
        held = [s for s in socks if s not in refused]
        assert len(refused) == EXTRA and len(held) == LIMIT
        for sock in refused:
            status, headers, payload = _answer(sock)
            assert status == 429 and headers["retry-after"] == "1"
            assert httpx.Response(429, content=payload).json() == {
                "message": f"max_in_flight_per_tenant: this tenant already has {LIMIT} requests "
                           "in flight on this API replica and none ended within 0.5 s "
                           f"(max_in_flight_per_tenant = {LIMIT})",
                "fix": f"send at most {LIMIT} requests at once (wait for an answer before the "
                       "next) and retry after the Retry-After seconds; the operator sets "
                       "SPOTPLANE_API_MAX_IN_FLIGHT_PER_TENANT",
                "errors": []}
        with served.client("flood") as flood, served.client("calm") as calm, \
                served.client("admin") as admin:
            assert flood.get("/v1/clock").status_code == 429  # its two uploads still hold
            assert calm.get("/v1/tenants/me").status_code == 200  # another tenant: served
            assert admin.get("/v1/tenants").status_code == 200  # the admin: served
            for sock in held:  # the held uploads finish, and free their slots
                sock.sendall(body[16:])
                status, _, payload = _answer(sock)
                assert status == 200, payload
            wait_until(lambda: flood.get("/v1/clock").status_code == 200, 30,
                       "the tenant's slots to be free again")
    finally:
        for sock in socks:
            sock.close()


def test_in_flight_is_capped_per_tenant_and_for_all_tenants() -> None:
    async def scenario() -> None:
        slots = InFlight(per_tenant=2, tenants_total=3, wait_s=0.05)
        a1, a2 = await slots.acquire("a"), await slots.acquire("a")
        with pytest.raises(RateLimited, match="max_in_flight_per_tenant = 2") as refused:
            await slots.acquire("a")  # waits 0.05 s: none of a's ends
        assert refused.value.retry_after_s == 1.0 and slots.waiting("a") == 0
        slots.wait_s = 60.0  # refused lately: the next one over the cap gets no queue at all
        with pytest.raises(RateLimited, match="max_in_flight_per_tenant"):
            await asyncio.wait_for(slots.acquire("a"), timeout=5.0)
        b1 = await slots.acquire("b")
        with pytest.raises(RateLimited, match="^tenants_in_flight: all tenants together already have 3"):
            await slots.acquire("c")
        admin = await slots.acquire(None)  # the admin is never capped
        a1.release()
        a1.release()  # a second release gives nothing back twice
        assert slots.count("a") == 1
        c1 = await slots.acquire("c")
        for held in (a2, b1, c1, admin):
            held.release()
        assert [slots.count(t) for t in "abc"] == [0, 0, 0]

    asyncio.run(scenario())


def test_a_request_over_the_cap_waits_for_its_tenants_next_slot_in_order() -> None:
    async def scenario() -> None:
        slots = InFlight(per_tenant=1, wait_s=5.0)
        first = await slots.acquire("a")
        second = asyncio.create_task(slots.acquire("a"))
        third = asyncio.create_task(slots.acquire("a"))
        other = await slots.acquire("b")  # another tenant does not queue behind a
        await asyncio.sleep(0)
        assert slots.waiting("a") == 2 and not second.done()
        first.release()  # the slot goes to the first waiter, the count stays one
        held = await second
        assert slots.count("a") == 1 and not third.done()
        third.cancel()  # a waiter that goes away leaves the queue
        with pytest.raises(asyncio.CancelledError):
            await third
        assert slots.waiting("a") == 0
        held.release()
        other.release()
        assert slots.count("a") == slots.count("b") == 0

    asyncio.run(scenario())


def test_the_client_retries_an_in_flight_refusal_but_not_a_rate_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 429 of the in-flight bound was refused before it ran: the client sleeps Retry-After
    and sends it again (a few times); a 429 of the rate limit is the caller's to handle."""
    import httpx

    from controlplane import client as client_module
    from controlplane.client import ApiError, SpotplaneClient

    busy = {"message": "max_in_flight_per_tenant: this tenant already has 1 requests in flight", "fix": "x"}
    rate = {"message": "more than 100 requests/s (burst 200)", "fix": "slow down"}
    answers: list[tuple[int, dict[str, str]]] = []
    sent: list[str] = []
    slept: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        status, body = answers.pop(0) if answers else (200, {"status": "ok"})
        return httpx.Response(status, json=body, headers={"Retry-After": "1"} if status == 429 else {})

    monkeypatch.setattr(client_module.time, "sleep", slept.append)
    c = SpotplaneClient("http://api")
    c._http = httpx.Client(base_url="http://api", transport=httpx.MockTransport(handler))
    answers[:] = [(429, busy), (429, busy)]
    assert c.healthz() == {"status": "ok"} and len(sent) == 3 and slept == [1.0, 1.0]
    sent.clear()
    answers[:] = [(429, rate)]
    with pytest.raises(ApiError, match="HTTP 429: more than 100 requests/s"):
        c.healthz()
    assert len(sent) == 1
    sent.clear()
    answers[:] = [(429, busy)] * 10
    with pytest.raises(ApiError, match="max_in_flight_per_tenant"):
        c.healthz()
    assert len(sent) == client_module.IN_FLIGHT_RETRIES + 1
