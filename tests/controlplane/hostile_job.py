"""A hostile tenant's job (run by tests/controlplane/test_security.py on the workload Ray): it
tries to reach the control plane's secrets, actors, store and another tenant's artifacts, and
prints one JSON line ``HOSTILE {...}`` saying what each attempt got."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def attempt(fn: Any) -> str:
    try:
        return f"GOT {fn()!r}"[:300]
    except BaseException as e:  # noqa: BLE001 - every failure is the answer
        return f"FAILED {type(e).__name__}: {e}"[:300]


def read(path: Path) -> str:
    return path.read_text()[:100]


def open_db(path: Path) -> list[Any]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    return conn.execute("select name from sqlite_master").fetchall()


def by_path(state_dir: Path, control_pid: str, control_home: Path) -> dict[str, str]:
    """What it gets knowing where the control plane keeps things (paths are no secret)."""
    return {
        "store": attempt(lambda: open_db(state_dir / "spotplane.db")),
        "store_bytes": attempt(lambda: (state_dir / "spotplane.db").read_bytes()[:16]),
        "listing": attempt(lambda: sorted(os.listdir(state_dir))),
        "endpoint": attempt(lambda: read(state_dir / "endpoint.json")),
        "environ": attempt(lambda: Path(f"/proc/{control_pid}/environ").read_bytes()[:16]),
        "ray_token": attempt(lambda: read(control_home / ".ray" / "auth_token")),
    }


def main(victim_job: str, namespace: str, control_gcs: str, state_dir: str, control_pid: str,
         control_home: str) -> None:
    out: dict[str, Any] = {"env": dict(os.environ), "uid": os.getuid()}
    out["by_path"] = by_path(Path(state_dir), control_pid, Path(control_home))
    home = Path.home()
    state = home / ".local" / "state" / "spotplane"
    out["files"] = {
        str(p): attempt(lambda p=p: read(p))
        for p in (state / "endpoint.json", state / "spotplane.db", Path("endpoint.json"))
    }
    out["own_ray_token"] = attempt(lambda: read(home / ".ray" / "auth_token"))  # the workload's
    from controlplane.core.config import Settings

    out["store"] = {
        str(p): attempt(lambda p=p: open_db(p))
        for p in (Settings().state_dir / "spotplane.db", state / "spotplane.db",
                  Path("spotplane.db"))
    }
    import ray

    for tries in range(1, 6):  # a loaded machine may miss Ray's connect timeout
        try:
            ray.init(address="auto", log_to_driver=False, configure_logging=False)
            break
        except ConnectionError as e:
            print(f"ray.init try {tries}: {e}", flush=True)
            if tries == 5:
                raise
            time.sleep(3)
    out["gcs"] = attempt(lambda: ray.get_runtime_context().gcs_address)
    out["controller"] = attempt(lambda: ray.get_actor("spotplane-controller", namespace=namespace))
    out["named_actors"] = ray.util.list_named_actors(all_namespaces=True)
    ray.shutdown()
    probe = (f"import ray; ray.init(address={control_gcs!r}, log_to_driver=False); "
             f"print(ray.get_actor('spotplane-controller', namespace={namespace!r}))")
    try:
        r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
        out["control_ray"] = f"{'GOT' if r.returncode == 0 else 'FAILED'} rc={r.returncode} {r.stdout[-200:]}"
    except subprocess.TimeoutExpired:
        out["control_ray"] = "FAILED timeout"
    from clusters.artifacts import open_store

    store = open_store(os.environ["SPOTPLANE_ARTIFACT_URI"])
    out["artifact_uri"] = os.environ["SPOTPLANE_ARTIFACT_URI"]
    out["other_list"] = attempt(lambda: store.list(victim_job))
    out["other_restore"] = attempt(lambda: store.restore_latest(victim_job))
    out["other_traversal"] = attempt(lambda: store.list(f"../../{victim_job}"))
    print("HOSTILE " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:7])
