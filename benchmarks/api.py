"""Job submissions through the Serve API at 16 concurrent clients.

``python -m benchmarks.api [--json] [--requests N] [--clients 16] [--plot FILE.png]`` starts a
local Ray, the Serve API on a free port over a fresh store, creates one tenant per client, and
has every client submit spot jobs back to back over a kept-alive connection. It reports the
throughput, the latency percentiles, and checks that every accepted submission is in the store
afterwards. Targets: >= 100 submissions/s, p99 < 500 ms (same-machine anchors: Ray Serve
hello-world 126/s, bare FastAPI 314/s).
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from actors.raylocal import init_local_ray
from benchmarks import entry
from controlplane.store import Store
from serve.app import start_api, stop_api
from serve.auth import new_admin_token

TARGET_PER_SECOND = 100.0
TARGET_P99_MS = 500.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Conn:
    """A minimal HTTP/1.1 keep-alive connection (asyncio streams).

    The load generator shares the 2 cores with the server: httpx costs ~3 ms of CPU per request
    here, this ~0.1 ms, so the measured throughput is the server's, not the client's.
    """

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port = host, port
        self.head = (f"POST /v1/jobs HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
                     "Content-Type: application/json\r\nContent-Length: ")
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(f"{self.head}{len(body)}\r\n\r\n".encode() + body)
        await self.writer.drain()
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
def local_api(db: str | Path, admin: str, files: Path | None = None) -> Iterator[str]:
    """The API served from ``db`` on a free port (on a local Ray of its own unless one runs);
    uploaded packages and logs under ``files`` (default: beside a SQLite ``db``)."""
    import ray

    own_ray = not ray.is_initialized()  # a test session may already run one
    if own_ray:  # a private Ray: never one another process on this machine started
        init_local_ray(num_cpus=2, include_dashboard=False, log_to_driver=False,
                       configure_logging=False, namespace="spotplane-bench")
    try:
        url = start_api(db, admin, free_port(), package_dir=files and files / "packages",
                        log_dir=files and files / "logs")
        try:
            yield url
        finally:
            stop_api()
    finally:
        if own_ray:
            ray.shutdown()


def run(requests: int = 1600, clients: int = 16, warmup: int = 64) -> dict[str, Any]:
    """Start Ray + Serve over a fresh store, submit, verify; the result dict of ``--json``."""

    state = Path(tempfile.mkdtemp(prefix="spotplane-bench-api-"))
    db = state / "spotplane.db"
    store = Store(db)
    tokens = [store.create_tenant(f"bench-{i}", max_gpus=1000)[1] for i in range(clients)]
    admin = new_admin_token()
    with local_api(db, admin) as url:
        per_client = max(1, requests // clients)
        asyncio.run(_run_clients(url, tokens[:1], warmup))  # warm the replica and the proxy
        lat, accepted, wall = asyncio.run(_run_clients(url, tokens, per_client))
    ids = set(accepted)
    stored = {j.id for j in store.list_jobs(None, limit=10**9)}
    warm = warmup
    store.close()
    arr = np.asarray(lat)
    return {
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


@entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.api", description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--requests", type=int, default=1600, help="submissions in total")
    ap.add_argument("--clients", type=int, default=16, help="concurrent clients")
    ap.add_argument("--plot", default=None, metavar="FILE.png", help="latency histogram")
    args = ap.parse_args(argv)
    with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the one JSON object
        result = run(args.requests, args.clients)
    lat = result.pop("_latencies")
    result.pop("_in_store_total")
    result.pop("_warmup")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        ax.hist(lat, bins=60)
        ax.axvline(result["p50_ms"], color="k", ls="--", label=f"p50 {result['p50_ms']} ms")
        ax.axvline(result["p99_ms"], color="r", ls="--", label=f"p99 {result['p99_ms']} ms")
        ax.set_xlabel("submission latency (ms)")
        ax.set_ylabel("submissions")
        ax.set_title(f"{result['clients']} clients: {result['per_second']}/s")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
    if args.json:
        print(json.dumps(result))
        return 0
    ok_rate = result["per_second"] >= TARGET_PER_SECOND
    ok_p99 = result["p99_ms"] < TARGET_P99_MS
    ok_store = result["stored"] == result["accepted"]
    print(f"{'metric':<22} {'value':>10}  target")
    print(f"{'clients':<22} {result['clients']:>10}")
    print(f"{'submitted':<22} {result['submitted']:>10}")
    print(f"{'accepted':<22} {result['accepted']:>10}")
    print(f"{'stored (of accepted)':<22} {result['stored']:>10}  = accepted {'ok' if ok_store else 'MISSED'}")
    print(f"{'submissions / s':<22} {result['per_second']:>10}  >= {TARGET_PER_SECOND:.0f} {'ok' if ok_rate else 'MISSED'}")
    print(f"{'p50 ms':<22} {result['p50_ms']:>10}")
    print(f"{'p99 ms':<22} {result['p99_ms']:>10}  < {TARGET_P99_MS:.0f} {'ok' if ok_p99 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
