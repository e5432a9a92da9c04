"""The API's reads against a store of a million job rows, on SQLite or on PostgreSQL.

``python -m benchmarks.store_reads [--db sqlite|pgserver|postgresql://...] [--rows 1000000]
[--tenants 10] [--reads 200] [--json]`` writes ``--rows`` QUEUED jobs spread over the tenants in
bulk (one body template, as ``benchmarks.backlog`` writes its backlog), starts the Serve API over
the store on a local Ray, and times over one kept-alive HTTP connection: a tenant's first page
``GET /v1/jobs?limit=100``, a page by cursor 90% deep into it (``after=``), and
``GET /v1/jobs/{id}`` of jobs drawn at random from the whole table. ``--db pgserver`` runs a
throwaway PostgreSQL from the ``pgserver`` package (the test suite's); a ``postgresql://`` URL
must name an empty database. Target: p99 < 50 ms for each read.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks import entry
from benchmarks.api import local_api
from benchmarks.stores import store_at
from controlplane.core.models import JobKind, JobSpec, JobState
from controlplane.store import Store, is_postgres, redact
from controlplane.store.backend import PostgresTx, Tx
from serve.auth import new_admin_token

TARGET_P99_MS = 50.0
PAGE = 100
CHUNK = 20_000
JOB_INSERT = "id, tenant_id, kind, state, bag_id, submitted_at, body"


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load_jobs(store: Store, tenants: list[str], rows: int) -> float:
    """``rows`` QUEUED spot jobs, round-robin over ``tenants``, in bulk; returns rows/s."""
    spec = JobSpec(name="sweep", kind=JobKind.SPOT, compute_hours=5, accelerator="V100")
    template = store._new_job(tenants[0], spec, 0.0)
    template.state = JobState.QUEUED
    body = template.model_dump_json()
    t0 = time.perf_counter()
    for start in range(0, rows, CHUNK):
        batch = []
        for i in range(start, min(rows, start + CHUNK)):
            job_id, owner = f"job-r{i:09d}", tenants[i % len(tenants)]
            batch.append((job_id, owner, "spot", "QUEUED", None, float(i),
                          body.replace(template.id, job_id, 1).replace(tenants[0], owner, 1)))
        with store._tx() as db:
            write(db, batch)
        if (start // CHUNK) % 10 == 0:
            _log(f"  {min(rows, start + CHUNK):,}/{rows:,} rows written")
    if store.backend == "postgresql":
        with store._tx() as db:  # fresh statistics, as autovacuum would give a real store
            db.execute("ANALYZE jobs")
    return rows / (time.perf_counter() - t0)


def write(db: Tx, rows: list[tuple[Any, ...]]) -> None:
    """Insert job rows: PostgreSQL's COPY, SQLite's executemany (the triggers fire for each)."""
    if isinstance(db, PostgresTx):
        with db.conn.cursor() as cur, cur.copy(f"COPY jobs ({JOB_INSERT}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        return
    db.executemany(f"INSERT INTO jobs ({JOB_INSERT}) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)


def timed(get: Callable[[], httpx.Response], n: int) -> dict[str, float]:
    """p50, p99 and max of ``n`` sequential requests (ms); every one must answer 200."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = get()
        times.append((time.perf_counter() - t0) * 1000)
        if r.status_code != 200:
            raise RuntimeError(f"{r.request.url} answered {r.status_code}: {r.text[:200]}")
    arr = np.asarray(times)
    return {"p50_ms": round(float(np.percentile(arr, 50)), 2),
            "p99_ms": round(float(np.percentile(arr, 99)), 2), "max_ms": round(float(arr.max()), 2)}


def measure(url: str, token: str, rows: int, tenants: int, reads: int,
            seed: int = 0) -> dict[str, dict[str, float]]:
    """The three reads through the API at ``url`` as one tenant (tenant 0)."""
    rng = random.Random(seed)
    deep = f"job-r{int(rows * 0.9) // tenants * tenants:09d}"  # tenant 0's, 90% into the table
    mine = [i for i in range(0, rows, tenants)]
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                      timeout=30.0) as http:
        for _ in range(20):  # warm the replica, the proxy and the connection
            http.get("/v1/jobs", params={"limit": PAGE})
        first = timed(lambda: http.get("/v1/jobs", params={"limit": PAGE}), reads)
        cursor = timed(lambda: http.get("/v1/jobs", params={"limit": PAGE, "after": deep}), reads)
        one = timed(lambda: http.get(f"/v1/jobs/job-r{rng.choice(mine):09d}"), reads)
    return {"first_page": first, "cursor_page": cursor, "get_job": one}


def run(db: str, rows: int, tenants: int, reads: int) -> dict[str, Any]:
    with store_at(db) as target:
        store = Store(target)
        if store.list_jobs(None, limit=1):
            raise RuntimeError(f"the store at {redact(target)} already holds jobs: use an empty one")
        made = [store.create_tenant(f"reads-{i}", max_gpus=10_000) for i in range(tenants)]
        _log(f"{store.backend}: writing {rows:,} job rows...")
        rate = load_jobs(store, [t.id for t, _ in made], rows)
        admin = new_admin_token()
        with tempfile.TemporaryDirectory(prefix="spotplane-store-reads-api-") as api_dir, \
                local_api(target, admin, Path(api_dir)) as url:
            _log(f"{store.backend}: timing {reads} of each read through {url}...")
            out = measure(url, made[0][1], rows, tenants, reads)
        store.close()
    return {"backend": "postgresql" if is_postgres(target) else "sqlite", "rows": rows,
            "tenants": tenants, "reads": reads, "load_rows_per_s": round(rate), **out}


@entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.store_reads",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--db", default="sqlite", metavar="sqlite|pgserver|URL",
                    help="the store: a fresh SQLite file, a throwaway pgserver PostgreSQL, or a "
                         "postgresql:// URL of an empty database")
    ap.add_argument("--rows", type=int, default=1_000_000, help="job rows in the store")
    ap.add_argument("--tenants", type=int, default=10, help="tenants the rows are spread over")
    ap.add_argument("--reads", type=int, default=200, help="requests timed per read")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args(argv)
    with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the one JSON object
        result = run(args.db, args.rows, args.tenants, args.reads)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{result['backend']}: {result['rows']:,} job rows over {result['tenants']} tenants "
          f"(written at {result['load_rows_per_s']:,} rows/s), {result['reads']} requests each")
    print(f"{'read':<34} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}  target p99")
    names = {"first_page": f"GET /v1/jobs?limit={PAGE}", "cursor_page": "GET /v1/jobs?after= (90% deep)",
             "get_job": "GET /v1/jobs/{id}"}
    for key, label in names.items():
        r = result[key]
        ok = "ok" if r["p99_ms"] < TARGET_P99_MS else "MISSED"
        print(f"{label:<34} {r['p50_ms']:>8} {r['p99_ms']:>8} {r['max_ms']:>8}  "
              f"< {TARGET_P99_MS:.0f} {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
