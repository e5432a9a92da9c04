"""Job submissions through the Serve API at 16 concurrent clients, on 1, 2 and 4 replicas.

``python -m benchmarks.api [--json] [--requests N] [--clients 16] [--replicas 1,2,4]
[--bag-jobs 1000] [--bags 8] [--bag-clients 1] [--plot FILE.png]`` starts a local Ray and, for each replica
count, the Serve API on a free port over a fresh SQLite store, creates one tenant per client,
and has every client submit spot jobs back to back over a kept-alive connection. It reports
the throughput, the latency percentiles, and checks that every accepted submission is in the
store afterwards. Then the batch path: ``--bags`` bags of ``--bag-jobs`` jobs each through
``POST /v1/bags`` (``--bag-clients``, default 1, at once), jobs per second into the store. Targets: >= 100
submissions/s, p99 < 500 ms (same-machine anchors: Ray Serve hello-world 126/s, bare FastAPI
314/s); batch >= 2,000 jobs/s with a bag's p99 < 500 ms.

``--flood [--flood-seconds 40] [--flood-clients 16] [--flood-limit N]`` runs only the noisy
neighbour: tenant A lists its 1,000 jobs with 16 clients back to back (waiting out each 429's
Retry-After) while tenant B lists its own; B's p50/p99 quiet and under the flood, A's 429s.
Targets: B's flood p99 <= 2 x its quiet p99 (``flood_over_quiet``), with ``a_429s`` > 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from actors.raylocal import init_local_ray
from benchmarks import entry
from benchmarks.stores import store_at
from controlplane.core.errors import InvalidInput
from controlplane.core.models import JobKind, JobSpec
from controlplane.store import Store
from serve.app import start_api, stop_api
from serve.auth import new_admin_token
from serve.limits import ApiLimits

TARGET_PER_SECOND = 100.0
TARGET_P99_MS = 500.0
TARGET_BATCH_JOBS_PER_SECOND = 2000.0
FLOOD_TARGET_RATIO = 2.0  # B's p99 under A's flood over B's quiet p99
FLOOD_B_PAUSE_S = 0.05  # tenant B's pause between its requests (a light user)
FLOOD_ROUNDS = 4  # quiet and flood phases, alternating
BATCH_CLIENTS = 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Conn:
    """A minimal HTTP/1.1 keep-alive connection (asyncio streams).

    The load generator shares the 2 cores with the server: httpx costs ~3 ms of CPU per request
    here, this ~0.1 ms, so the measured throughput is the server's, not the client's.
    """

    def __init__(self, host: str, port: int, token: str, path: str = "/v1/jobs",
                 method: str = "POST") -> None:
        self.host, self.port = host, port
        self.head = (f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
                     "Content-Type: application/json\r\nContent-Length: ")
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.retry_after = 0.0  # the last answer's Retry-After seconds (0: none)

    async def post(self, body: bytes = b"") -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(f"{self.head}{len(body)}\r\n\r\n".encode() + body)
        await self.writer.drain()
        self.retry_after = 0.0
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        length, close = 0, False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
            elif name.lower() == "connection" and value.strip().lower() == "close":
                close = True
            elif name.lower() == "retry-after":
                self.retry_after = float(value)
        payload = await self.reader.readexactly(length)
        if close:
            await self.close()
        return status, payload

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()
        self.reader = self.writer = None


async def _client(url: str, token: str, n: int, idx: int, lat: list[float],
                  accepted: list[str]) -> int:
    """One client: ``n`` submissions back to back; returns how many were refused."""
    refused = 0
    parsed = httpx.URL(url)
    conn = _Conn(parsed.host, int(parsed.port or 80), token)
    try:
        for i in range(n):
            body = json.dumps({"name": f"bench-{idx}-{i}", "kind": "spot", "compute_hours": 1.0 + (i % 7),
                               "gpus_per_worker": 1}).encode()
            t0 = time.perf_counter()
            status, payload = await conn.post(body)
            lat.append((time.perf_counter() - t0) * 1000.0)
            if status == 201:
                accepted.append(json.loads(payload)["id"])
            else:
                refused += 1
    finally:
        await conn.close()
    return refused


async def _run_clients(url: str, tokens: list[str], per_client: int) -> tuple[list[float], list[str], float]:
    lat: list[float] = []
    accepted: list[str] = []
    t0 = time.perf_counter()
    await asyncio.gather(*[_client(url, tok, per_client, i, lat, accepted) for i, tok in enumerate(tokens)])
    return lat, accepted, time.perf_counter() - t0


@contextlib.contextmanager
def local_api(db: str | Path, admin: str, files: Path | None = None,
              replicas: int = 1, limits: ApiLimits | None = None) -> Iterator[str]:
    """The API served from ``db`` on a free port by ``replicas`` Serve replicas (on a local Ray
    of its own unless one runs) under ``limits`` (default: the settings'); uploaded packages
    and logs under ``files`` (default: beside a SQLite ``db``)."""
    import ray

    own_ray = not ray.is_initialized()  # a test session may already run one
    if own_ray:  # a private Ray: never one another process on this machine started
        init_local_ray(control_plane=True, num_cpus=2, include_dashboard=False, log_to_driver=False,
                       configure_logging=False, namespace="spotplane-bench")
    try:
        url = start_api(db, admin, free_port(), package_dir=files and files / "packages",
                        log_dir=files and files / "logs", replicas=replicas, limits=limits)
        try:
            yield url
        finally:
            stop_api()
    finally:
        if own_ray:
            ray.shutdown()


@contextlib.contextmanager
def _one_ray() -> Iterator[None]:
    """One local Ray for every run (a second ``ray.init`` after a shutdown may find the first)."""
    import ray

    if ray.is_initialized():
        yield
        return
    init_local_ray(control_plane=True, num_cpus=2, include_dashboard=False, log_to_driver=False,
                   configure_logging=False, namespace="spotplane-bench")
    try:
        yield
    finally:
        ray.shutdown()


def run(requests: int = 1600, clients: int = 16, warmup: int = 64, replicas: int = 1,
        bags: int = 0, bag_jobs: int = 1000, bag_clients: int = BATCH_CLIENTS,
        db: str = "sqlite") -> dict[str, Any]:
    """Start Ray + Serve over a fresh store (``db``: sqlite, pgserver or an empty
    PostgreSQL's URL), submit, verify; the result dict of ``--json`` (with ``bags``: the batch
    path's under ``"batch"``)."""
    with store_at(db) as target:
        return _run_on(target, requests, clients, warmup, replicas, bags, bag_jobs, bag_clients)


def _run_on(db: str, requests: int, clients: int, warmup: int, replicas: int, bags: int,
            bag_jobs: int, bag_clients: int) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="spotplane-bench-api-"))
    store = Store(db)
    tokens = [store.create_tenant(f"bench-{i}", max_gpus=1000)[1] for i in range(clients)]
    admin = new_admin_token()
    batch: dict[str, Any] | None = None
    with local_api(db, admin, state, replicas=replicas) as url:
        per_client = max(1, requests // clients)
        for tok in tokens[:replicas]:  # warm every replica (and the proxy)
            asyncio.run(_run_clients(url, [tok], max(1, warmup // replicas)))
        lat, accepted, wall = asyncio.run(_run_clients(url, tokens, per_client))
        if bags:
            batch = _batch(url, store, tokens[:bag_clients], bags, bag_jobs)
    ids = set(accepted)
    stored = {j.id for j in store.list_jobs(None, limit=10**9)}
    warm = max(1, warmup // replicas) * min(replicas, len(tokens))
    store.close()
    arr = np.asarray(lat)
    out = {
        "replicas": replicas,
        "clients": clients,
        "submitted": int(per_client * clients),
        "accepted": len(accepted),
        "stored": len(ids & stored),
        "_in_store_total": len(stored),
        "_warmup": warm,
        "per_second": round(len(lat) / wall, 1),
        "p50_ms": round(float(np.percentile(arr, 50)), 1),
        "p99_ms": round(float(np.percentile(arr, 99)), 1),
        "_latencies": lat,
    }
    if batch is not None:
        out["batch"] = batch
    return out


def _batch(url: str, store: Store, tokens: list[str], bags: int, bag_jobs: int) -> dict[str, Any]:
    """``bags`` bags of ``bag_jobs`` jobs through POST /v1/bags, ``len(tokens)`` clients at
    once; jobs per second into the store (every job of every 201 counted in the store)."""

    async def client(tok: str, n: int, idx: int, lat: list[float], ids: list[str]) -> None:
        parsed = httpx.URL(url)
        conn = _Conn(parsed.host, int(parsed.port or 80), tok, "/v1/bags")
        try:
            for i in range(n):
                body = json.dumps({"name": f"bag-{idx}-{i}",
                                   "template": {"name": "b", "kind": "spot", "compute_hours": 1.0},
                                   "params": [{"i": k} for k in range(bag_jobs)]}).encode()
                t0 = time.perf_counter()
                status, payload = await conn.post(body)
                lat.append((time.perf_counter() - t0) * 1000.0)
                if status == 201:
                    ids.extend(json.loads(payload)["job_ids"])
        finally:
            await conn.close()

    async def all_clients() -> tuple[list[float], list[str], float]:
        lat: list[float] = []
        ids: list[str] = []
        per = max(1, bags // len(tokens))
        t0 = time.perf_counter()
        await asyncio.gather(*[client(tok, per, i, lat, ids) for i, tok in enumerate(tokens)])
        return lat, ids, time.perf_counter() - t0

    lat, ids, wall = asyncio.run(all_clients())
    stored = {j.id for j in store.list_jobs(None, limit=10**9)}
    arr = np.asarray(lat)
    return {"bags": len(lat), "jobs_per_bag": bag_jobs, "clients": len(tokens),
            "jobs_accepted": len(ids), "jobs_stored": len(set(ids) & stored),
            "jobs_per_second": round(len(ids) / wall, 1),
            "bag_p50_ms": round(float(np.percentile(arr, 50)), 1),
            "bag_p99_ms": round(float(np.percentile(arr, 99)), 1)}


def flood(seconds: float = 40.0, clients: int = 16, quiet_s: float = 20.0, a_jobs: int = 1000,
          b_jobs: int = 20, limits: ApiLimits | None = None) -> dict[str, Any]:
    """Tenant A lists its ``a_jobs`` jobs with ``clients`` clients back to back (waiting out
    each 429's Retry-After) for ``seconds`` on one replica, while tenant B lists its own; B's
    latency over ``quiet_s`` quiet and under the flood (in alternating phases), and how A was
    answered."""
    state = Path(tempfile.mkdtemp(prefix="spotplane-bench-flood-"))
    db = state / "spotplane.db"
    store = Store(db)
    a, tok_a = store.create_tenant("flood-a", max_gpus=1000)
    b, tok_b = store.create_tenant("calm-b", max_gpus=1000)
    spec = JobSpec(name="listed", kind=JobKind.SPOT, compute_hours=1.0)
    store.submit_jobs(a.id, [spec] * a_jobs)
    store.submit_jobs(b.id, [spec] * b_jobs)
    store.close()
    resolved = limits or ApiLimits()
    with local_api(db, new_admin_token(), state, limits=resolved) as url:
        parsed = httpx.URL(url)
        out = asyncio.run(_flood(parsed.host, int(parsed.port or 80), tok_a, tok_b, seconds,
                                 clients, quiet_s))
    return {"seconds": seconds, "clients": clients,
            "max_in_flight_per_tenant": resolved.max_in_flight_per_tenant, **out}


async def _flood(host: str, port: int, tok_a: str, tok_b: str, seconds: float, clients: int,
                 quiet_s: float) -> dict[str, Any]:
    """B's GET /v1/jobs latencies quiet, then under A's flood of the same; A's answers."""

    async def calm(until: float, lat: list[float]) -> None:
        conn = _Conn(host, port, tok_b, "/v1/jobs", "GET")
        try:
            while True:  # at least one request
                t0 = time.perf_counter()
                status, _ = await conn.post()
                if status == 200:
                    lat.append((time.perf_counter() - t0) * 1000.0)
                if time.perf_counter() >= until:
                    break
                await asyncio.sleep(FLOOD_B_PAUSE_S)
        finally:
            await conn.close()

    async def flooder(until: float, codes: Counter[int]) -> None:
        conn = _Conn(host, port, tok_a, "/v1/jobs", "GET")
        try:
            while time.perf_counter() < until:
                status, _ = await conn.post()
                codes[status] += 1
                if status == 429:
                    await asyncio.sleep(conn.retry_after or 1.0)
        finally:
            await conn.close()

    await calm(time.perf_counter() + 2.0, [])  # warm the proxy and the replica
    quiet: list[float] = []
    loud: list[float] = []
    codes: Counter[int] = Counter()
    for _ in range(FLOOD_ROUNDS):  # quiet and flood alternate: the machine's other load hits both
        await calm(time.perf_counter() + quiet_s / FLOOD_ROUNDS, quiet)
        phase = seconds / FLOOD_ROUNDS
        end = time.perf_counter() + phase
        flooding = [asyncio.create_task(flooder(end, codes)) for _ in range(clients)]
        await asyncio.sleep(min(1.0, phase / 4))  # the flood builds up
        await calm(end - min(0.5, phase / 8), loud)
        await asyncio.gather(*flooding)
    q99, f99 = float(np.percentile(quiet, 99)), float(np.percentile(loud, 99))
    return {"quiet_p50_ms": round(float(np.percentile(quiet, 50)), 1), "quiet_p99_ms": round(q99, 1),
            "flood_p50_ms": round(float(np.percentile(loud, 50)), 1), "flood_p99_ms": round(f99, 1),
            "flood_over_quiet": round(f99 / q99, 2), "b_quiet_requests": len(quiet),
            "b_flood_requests": len(loud), "a_served": codes[200], "a_429s": codes[429],
            "a_served_per_s": round(codes[200] / seconds, 1),
            "a_other": sum(n for c, n in codes.items() if c not in (200, 429))}


def _flood_table(r: dict[str, Any]) -> None:
    good = r["flood_over_quiet"] <= FLOOD_TARGET_RATIO and r["a_429s"] > 0
    print(f"flood: tenant A, {r['clients']} clients for {r['seconds']:g} s of GET /v1/jobs, "
          f"max_in_flight_per_tenant = {r['max_in_flight_per_tenant']}; tenant B lists its jobs")
    print(f"{'B quiet p50/p99 ms':>20} {'B flood p50/p99 ms':>20} {'p99 flood/quiet':>16} "
          f"{'A served/s':>10} {'A 429s':>7}  targets: flood/quiet <= {FLOOD_TARGET_RATIO:g}, A 429s > 0")
    print(f"{r['quiet_p50_ms']:>10} / {r['quiet_p99_ms']:<7} {r['flood_p50_ms']:>10} / "
          f"{r['flood_p99_ms']:<7} {r['flood_over_quiet']:>16} {r['a_served_per_s']:>10} "
          f"{r['a_429s']:>7}  {'ok' if good else 'MISSED'}")


def _replica_counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise InvalidInput("--replicas", f"{text!r} is not a list of counts >= 1", fix="e.g. --replicas 1,2,4")
    return counts


def _plot(path: str, runs: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in runs:
        ax.hist(r["_latencies"], bins=60, alpha=0.5,
                label=f"{r['replicas']} replica(s): p50 {r['p50_ms']} / p99 {r['p99_ms']} ms")
    ax.set_xlabel("submission latency (ms)")
    ax.set_ylabel("submissions")
    ax.set_title(f"{runs[0]['clients']} clients, SQLite store")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _table(runs: list[dict[str, Any]]) -> None:
    ok = "ok"
    print(f"{'replicas':>8} {'clients':>7} {'accepted':>8} {'stored':>7} {'subm/s':>8} {'p50 ms':>7} "
          f"{'p99 ms':>7}  targets: >= {TARGET_PER_SECOND:.0f}/s, p99 < {TARGET_P99_MS:.0f}, stored = accepted")
    for r in runs:
        good = (r["per_second"] >= TARGET_PER_SECOND and r["p99_ms"] < TARGET_P99_MS
                and r["stored"] == r["accepted"] == r["submitted"])
        print(f"{r['replicas']:>8} {r['clients']:>7} {r['accepted']:>8} {r['stored']:>7} {r['per_second']:>8} "
              f"{r['p50_ms']:>7} {r['p99_ms']:>7}  {ok if good else 'MISSED'}")
    clients = next((r["batch"]["clients"] for r in runs if "batch" in r), 0)
    print(f"\nbatch (POST /v1/bags, {clients} client(s) at once)  targets: >= "
          f"{TARGET_BATCH_JOBS_PER_SECOND:.0f} jobs/s, bag p99 < {TARGET_P99_MS:.0f} ms")
    print(f"{'replicas':>8} {'bags':>5} {'jobs/bag':>8} {'stored':>7} {'jobs/s':>8} {'p50 ms':>7} {'p99 ms':>7}")
    for r in runs:
        b = r.get("batch")
        if b is None:
            continue
        good = (b["jobs_per_second"] >= TARGET_BATCH_JOBS_PER_SECOND and b["bag_p99_ms"] < TARGET_P99_MS
                and b["jobs_stored"] == b["jobs_accepted"] == b["bags"] * b["jobs_per_bag"])
        print(f"{r['replicas']:>8} {b['bags']:>5} {b['jobs_per_bag']:>8} {b['jobs_stored']:>7} "
              f"{b['jobs_per_second']:>8} {b['bag_p50_ms']:>7} {b['bag_p99_ms']:>7}  {ok if good else 'MISSED'}")


@entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.api", description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--requests", type=int, default=1600, help="submissions in total")
    ap.add_argument("--clients", type=int, default=16, help="concurrent clients")
    ap.add_argument("--replicas", default="1,2,4", help="API replica counts to run, comma-separated")
    ap.add_argument("--bags", type=int, default=8, help="bags through the batch path (0: none)")
    ap.add_argument("--bag-jobs", type=int, default=1000, help="jobs per bag")
    ap.add_argument("--bag-clients", type=int, default=BATCH_CLIENTS,
                    help="clients posting bags at once (more: more jobs/s, each bag waits longer)")
    ap.add_argument("--plot", default=None, metavar="FILE.png", help="latency histograms")
    ap.add_argument("--db", default="sqlite", metavar="sqlite|pgserver|URL",
                    help="the store: a fresh SQLite file or pgserver PostgreSQL per run, or an "
                         "empty PostgreSQL's URL (one replica count)")
    ap.add_argument("--flood", action="store_true",
                    help="only the flood scenario: tenant A's clients against tenant B's latency")
    ap.add_argument("--flood-seconds", type=float, default=40.0, help="how long A floods")
    ap.add_argument("--flood-clients", type=int, default=16, help="A's concurrent clients")
    ap.add_argument("--flood-limit", type=int, default=None, metavar="N",
                    help="max_in_flight_per_tenant for the run (default: the setting's)")
    args = ap.parse_args(argv)
    if args.flood:
        return _main_flood(args)
    counts = _replica_counts(args.replicas)
    runs = []
    with contextlib.redirect_stdout(sys.stderr), _one_ray():  # stdout: the one JSON object
        for n in counts:
            runs.append(run(args.requests, args.clients, replicas=n, bags=args.bags,
                            bag_jobs=args.bag_jobs, bag_clients=args.bag_clients, db=args.db))
    if args.plot:
        _plot(args.plot, runs)
    for r in runs:
        for key in ("_latencies", "_in_store_total", "_warmup"):
            r.pop(key)
    if args.json:
        print(json.dumps({"store": args.db.split("://")[0], "runs": runs}))
        return 0
    _table(runs)
    return 0


def _main_flood(args: argparse.Namespace) -> int:
    """``--flood``: run the flood scenario; its table, or one JSON object with ``--json``."""
    limits = ApiLimits.from_settings()
    if args.flood_limit is not None:
        limits = limits.model_copy(update={"max_in_flight_per_tenant": args.flood_limit})
    with contextlib.redirect_stdout(sys.stderr), _one_ray():
        result = flood(args.flood_seconds, args.flood_clients, limits=limits)
    if args.json:
        print(json.dumps({"scenario": "flood", **result}))
    else:
        _flood_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
