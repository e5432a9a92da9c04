"""Cursor pages of GET /v1/jobs on a real Serve server: ``after=<job id>`` and the
``X-Spotplane-Next-After`` header, under a tight byte cap; each job once, tenants kept apart, a
well-formed cursor that is no job of the list a 404 naming ``after``, a malformed one a 422."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from controlplane.client import SpotplaneClient
from controlplane.core.models import Event, JobSpec
from controlplane.store import Store
from serve.limits import ApiLimits
from tests.pgfixtures import BACKENDS, fresh_database
from tests.support import free_port

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ADMIN = "spa_cursor-admin-token"
CAP = 65536  # bytes of one list answer: a page of 300 jobs is cut at about 90


@dataclass
class Paged:
    url: str
    store: Store
    tokens: dict[str, str]
    jobs: dict[str, list[str]]  # tenant name -> its job ids, oldest first

    def client(self, who: str) -> httpx.Client:
        token = ADMIN if who == "admin" else self.tokens[who]
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"},
                            timeout=30)


@pytest.fixture(scope="module", params=BACKENDS)
def paged(request: pytest.FixtureRequest, ray_cluster,  # type: ignore[no-untyped-def]
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Paged]:
    """The API over each backend: a SQLite file, then a database on the suite's PostgreSQL."""
    with contextlib.ExitStack() as stack:
        files = Path(tmp_path_factory.mktemp("cursor"))
        db = str(files / "spotplane.db")
        if request.param == "postgresql":
            db = stack.enter_context(fresh_database(request.getfixturevalue("pg_server")))
        yield from _serve(db, files)


def _serve(db: str, files: Path) -> Iterator[Paged]:
    from serve.app import start_api, stop_api

    store = Store(db)
    tokens, jobs = {}, {}
    ids = {}
    for name in ("acme", "beta"):
        tenant, tokens[name] = store.create_tenant(name, max_gpus=8)
        ids[name], jobs[name] = tenant.id, []
    for batch in range(4):  # the tenants' jobs interleave in the table
        for name, n in (("acme", 250), ("beta", 10)):
            jobs[name] += [j.id for j in store.submit_jobs(ids[name], [
                JobSpec(name=f"{name}-{batch}-{i}", compute_hours=1.0) for i in range(n)],
                now=0.0)]
    url = start_api(db, ADMIN, free_port(), limits=ApiLimits(max_list_bytes=CAP),
                    package_dir=files / "packages", log_dir=files / "logs")
    try:
        yield Paged(url, store, tokens, jobs)
    finally:
        stop_api()
        store.close()


def _follow(c: httpx.Client, **params: object) -> tuple[list[str], int]:
    """Every page by cursor: the ids in order and how many pages it took."""
    seen: list[str] = []
    pages = 0
    query = dict(params)
    while True:
        r = c.get("/v1/jobs", params=query)  # type: ignore[arg-type]
        assert r.status_code == 200, r.text
        assert len(r.content) <= CAP
        page = [j["id"] for j in r.json()]
        seen += page
        pages += 1
        after = r.headers.get("x-spotplane-next-after")
        if after is None:
            return seen, pages
        assert after == page[-1]  # the cursor is the last job of the page
        query = {**params, "after": after}


def test_paging_1000_jobs_by_cursor_returns_each_exactly_once(paged: Paged) -> None:
    with paged.client("acme") as acme:
        seen, pages = _follow(acme, limit=300)
    assert seen == paged.jobs["acme"]  # oldest first, each once, none of beta's
    assert pages >= 1000 // 300 + 1  # the byte cap cut pages short; the cursor went on
    with paged.client("acme") as acme:
        r = acme.get("/v1/jobs", params={"limit": 7})
        assert [j["id"] for j in r.json()] == paged.jobs["acme"][:7]
        assert r.headers["x-spotplane-next-after"] == paged.jobs["acme"][6]  # a full page
        assert "x-spotplane-truncated" not in r.headers
        last = acme.get("/v1/jobs", params={"after": paged.jobs["acme"][-2]})
        assert [j["id"] for j in last.json()] == paged.jobs["acme"][-1:]
        assert "x-spotplane-next-after" not in last.headers  # nothing after it
    with SpotplaneClient(paged.url, paged.tokens["acme"]) as client:  # the CLI's client
        assert [j["id"] for j in client.jobs(limit=1000)] == paged.jobs["acme"]
        assert [j["id"] for j in client.jobs(limit=450)] == paged.jobs["acme"][:450]


def test_cursor_pages_keep_tenants_apart(paged: Paged) -> None:
    with paged.client("beta") as beta:
        seen, _ = _follow(beta, limit=15)
        assert seen == paged.jobs["beta"]
        r = beta.get("/v1/jobs", params={"after": paged.jobs["acme"][0]})  # another's job
        assert r.status_code == 404, r.text
        assert r.json()["errors"][0]["field"] == "after"  # as if it did not exist
        missing = beta.get("/v1/jobs", params={"after": "job-000000000000"})
        assert missing.status_code == 404 and missing.json()["fix"] == r.json()["fix"]
    with paged.client("admin") as admin:
        everyone, _ = _follow(admin, limit=500)
        assert sorted(everyone) == sorted(paged.jobs["acme"] + paged.jobs["beta"])
        assert len(everyone) == len(set(everyone))
        r = admin.get("/v1/jobs", params={"tenant_id": paged.store.get_tenant("beta").id,
                                          "after": paged.jobs["acme"][5]})
        assert r.status_code == 404 and r.json()["errors"][0]["field"] == "after"


@pytest.mark.parametrize(("params", "status"), [
    ({"after": "job-doesnotexist"}, 404), ({"after": ""}, 422), ({"after": "x" * 65}, 422),
    ({"after": "job 1"}, 422)])
def test_a_bad_cursor_names_after(paged: Paged, params: dict[str, str], status: int) -> None:
    """Well-formed but no job of the list: 404; not an id at all (the OpenAPI's pattern): 422."""
    with paged.client("acme") as acme:
        r = acme.get("/v1/jobs", params=params)
    assert r.status_code == status, r.text
    body = r.json()
    assert body["errors"][0]["field"] == "after"
    assert body["message"].startswith("after: ")


def test_an_offset_after_a_cursor_skips_past_it(paged: Paged) -> None:
    with paged.client("acme") as acme:
        r = acme.get("/v1/jobs", params={"after": paged.jobs["acme"][3], "offset": 10, "limit": 5})
        assert r.status_code == 200, r.text
        assert [j["id"] for j in r.json()] == paged.jobs["acme"][14:19]
        old = acme.get("/v1/jobs", params={"offset": 995, "limit": 10})  # offset still works
        assert [j["id"] for j in old.json()] == paged.jobs["acme"][995:]


def test_the_dashboards_jobs_table_pages_by_cursor_in_submission_order(paged: Paged) -> None:
    with paged.client("acme") as acme:
        for desc, want in ((False, paged.jobs["acme"]), (True, paged.jobs["acme"][::-1])):
            seen: list[str] = []
            params: dict[str, object] = {"sort": "submitted", "desc": desc, "limit": 300}
            while True:
                r = acme.get("/v1/dashboard/jobs", params=params)  # type: ignore[arg-type]
                assert r.status_code == 200, r.text
                page = r.json()
                assert page["total"] == 1000  # every match, not only those past the cursor
                seen += [j["id"] for j in page["items"]]
                if page["next_after"] is None:
                    break
                params = {**params, "after": page["next_after"], "offset": len(seen)}
            assert seen == want
        r = acme.get("/v1/dashboard/jobs", params={"sort": "cost", "limit": 3})
        past = acme.get("/v1/dashboard/jobs", params={"sort": "cost", "limit": 3,
                                                      "after": r.json()["next_after"]})
        assert past.status_code == 200, past.text  # past the cursor in the page's own order
        assert r.json()["next_after"] == r.json()["items"][-1]["id"]
        assert not {j["id"] for j in r.json()["items"]} & {j["id"] for j in past.json()["items"]}


def test_the_other_lists_page_by_cursor_too(paged: Paged) -> None:
    """Tenants, bags, a job's events and decisions, fleet nodes: ``after`` + ``limit``, the next
    cursor while more follow, each item once, a foreign cursor a 404 naming ``after``."""
    acme_id = paged.store.get_tenant("acme").id
    with paged.client("admin") as admin:
        first = admin.get("/v1/tenants", params={"limit": 1})
        assert first.status_code == 200, first.text
        assert len(first.json()) == 1 and first.headers["x-spotplane-next-after"] == first.json()[0]["id"]
        rest = admin.get("/v1/tenants", params={"after": first.json()[0]["id"]})
        assert "x-spotplane-next-after" not in rest.headers
        names = [t["name"] for t in first.json() + rest.json()]
        assert sorted(names) == ["acme", "beta"]
        for path in ("/v1/bags", "/v1/fleet/nodes"):  # empty lists: one page, no cursor
            r = admin.get(path, params={"limit": 1})
            assert r.status_code == 200 and r.json() == [] and "x-spotplane-next-after" not in r.headers
    job = paged.jobs["acme"][0]
    paged.store.commit(events=[Event(at=float(k), tenant_id=acme_id, job_id=job, kind="note",
                                     cause=f"event {k}") for k in range(3)])
    with SpotplaneClient(paged.url, ADMIN) as client:
        assert sorted(t["name"] for t in client.tenants()) == ["acme", "beta"]
    with paged.client("acme") as acme:
        events = acme.get(f"/v1/jobs/{job}/events").json()
        assert [e["cause"] for e in events] == ["event 0", "event 1", "event 2"]
        seen, query = [], {"limit": 2}
        while True:
            page = acme.get(f"/v1/jobs/{job}/events", params=query)
            seen += page.json()
            if "x-spotplane-next-after" not in page.headers:
                break
            query = {"limit": 2, "after": page.headers["x-spotplane-next-after"]}
        assert seen == events  # two pages: 2 + 1
        bad = acme.get(f"/v1/jobs/{job}/events", params={"after": "999999999"})
        assert bad.status_code == 404 and bad.json()["errors"][0]["field"] == "after"
        assert acme.get(f"/v1/jobs/{job}/decisions", params={"limit": 5}).json() == []
        assert acme.get("/v1/tenants", params={"after": paged.store.get_tenant("beta").id}).status_code == 404
