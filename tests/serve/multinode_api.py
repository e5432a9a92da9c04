"""The API on two Serve replicas on two Ray nodes, with a PostgreSQL store: run in a process of
its own (``python -m tests.serve.multinode_api DB_URL OUT.json``) because it starts its own
multi-node Ray (``ray.cluster_utils.Cluster``: a head and two worker raylets on this machine)
beside the test session's. Writes what it saw, for ``test_multinode.py`` to judge.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

ADMIN = "spa_multinode-admin"
RATE, BURST = 4.0, 8  # one tenant's budget over every replica
FLOOD_S = 4.0  # how long the flooding tenant sends at 3 x RATE
FLOODERS = 6  # its senders, each paced at 3 x RATE / FLOODERS: a slow answer delays one of them
PACKAGE = "_ray_pkg_1234567890abcdef.zip"


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    """``check()``'s first truthy answer, polled; AssertionError naming ``what`` at the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.2)


def call(c: httpx.Client, method: str, path: str, **kw: Any) -> httpx.Response:
    """One request, retried after the Retry-After the API answers a 429 with."""
    while True:
        r = c.request(method, path, **kw)
        if r.status_code != 429:
            return r
        time.sleep(float(r.headers.get("Retry-After", "1")))


def until_both(c: httpx.Client, method: str, path: str, tries: int = 40,
               **kw: Any) -> list[dict[str, Any]]:
    """The same request again until two replicas have answered it (or ``tries`` run out)."""
    seen: list[dict[str, Any]] = []
    for _ in range(tries):
        r = call(c, method, path, **kw)
        seen.append({"replica": r.headers.get("X-Spotplane-Replica"), "status": r.status_code,
                     "body": r.json(), "replayed": r.headers.get("Idempotent-Replayed")})
        if len({s["replica"] for s in seen}) >= 2:
            break
    return seen


def zipped() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("train.py", "print('hello')\n")
    return buf.getvalue()


def scenario(url: str, out: dict[str, Any]) -> None:
    admin = httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {ADMIN}"})
    health = {}
    wait_for("both replicas answering /healthz",
             lambda: health.update({(h := admin.get("/healthz").json())["replica"]: h["node_id"]})
             or len(health) >= 2)
    out["replica_nodes"] = health
    tokens = {}
    for name in ("acme", "flood"):
        r = call(admin, "POST", "/v1/tenants", json={"name": name, "max_gpus": 8})
        assert r.status_code == 201, r.text
        tokens[name] = r.json()["token"]
    acme = httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {tokens['acme']}"})
    put = call(acme, "PUT", f"/v1/packages/{PACKAGE}", content=zipped())
    out["package_put"] = {"status": put.status_code, "replica": put.headers.get("X-Spotplane-Replica")}
    out["package_get"] = until_both(acme, "GET", f"/v1/packages/{PACKAGE}")
    spec = {"name": "uses-package", "compute_hours": 1.0, "entrypoint": "python train.py",
            "runtime_env": {"working_dir": f"gcs://{PACKAGE}"}}
    out["package_submits"] = until_both(acme, "POST", "/v1/jobs", json=spec)
    once = {"name": "once", "kind": "spot", "compute_hours": 1.0}
    out["idempotent"] = until_both(acme, "POST", "/v1/jobs", json=once,
                                   headers={"Idempotency-Key": "k-multinode"})
    jobs = call(acme, "GET", "/v1/jobs").json()
    out["jobs_named_once"] = sum(j["name"] == "once" for j in jobs)
    flood = httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {tokens['flood']}"})
    sent: list[dict[str, Any]] = []  # list.append is atomic: the senders share it
    t0 = time.monotonic()

    def sender() -> None:  # 3 x RATE in all, paced by each sender's schedule
        n = 0
        while (now := time.monotonic() - t0) < FLOOD_S:
            r = flood.get("/v1/tenants/me")
            sent.append({"at": now, "status": r.status_code, "replica": r.headers.get("X-Spotplane-Replica")})
            n += 1
            time.sleep(max(0.0, n * FLOODERS / (3 * RATE) - (time.monotonic() - t0)))

    with ThreadPoolExecutor(FLOODERS) as pool:
        for f in [pool.submit(sender) for _ in range(FLOODERS)]:
            f.result()
    out["flood"] = {"sent": sent, "window_s": time.monotonic() - t0}


def main(db: str, out_path: str) -> None:
    os.environ["RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING"] = "0"  # the head's proxy spreads
    import ray
    from ray.cluster_utils import Cluster

    from actors.raylocal import control_plane_config
    from controlplane.store import Store
    from serve.app import start_api, start_proxy, stop_api
    from serve.limits import ApiLimits
    from tests.support import free_port

    out: dict[str, Any] = {}
    t0 = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "_system_config": control_plane_config()})
    try:
        workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
        ray.init(address=cluster.address, namespace="spotplane-multinode", log_to_driver=False,
                 configure_logging=False)
        out["cluster_nodes"] = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        out["worker_nodes"] = [w.node_id for w in workers]
        port = free_port()
        start_proxy("127.0.0.1", port, proxy_location="HeadOnly")
        Store(db).close()
        url = start_api(db, ADMIN, port, limits=ApiLimits(rate_per_s=RATE, burst=BURST),
                        replicas=2, max_replicas_per_node=1)
        out["started_s"] = time.monotonic() - t0
        scenario(url, out)
        stop_api()
    except BaseException as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        out["took_s"] = time.monotonic() - t0
        with open(out_path, "w") as f:
            json.dump(out, f)
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
