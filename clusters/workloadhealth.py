"""A workload Ray cluster's health, asked from outside it: its job API answers and its nodes are
listed (Ray's dashboard: ``/api/version`` and the state API's ``/api/v0/nodes``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

HEALTH_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ClusterHealth:
    """One check: whether it passed, the Ray nodes alive, and why it failed ('' when it passed)."""

    healthy: bool
    nodes_alive: int
    message: str = ""


def token_headers(token_ref: str | None) -> dict[str, str]:
    """The Authorization header of a cluster whose ``token_ref`` is a readable file; none for a
    cluster without a token (a secret's name is resolved by whoever runs the check)."""
    if token_ref is None:
        return {}
    path = Path(token_ref).expanduser()
    if not path.is_file():
        return {}
    return {"Authorization": f"Bearer {path.read_text().strip()}"}


def alive_nodes(answer: Any) -> int:
    """The ALIVE nodes in a state API answer (``data.result.result`` of node rows)."""
    rows = answer.get("data", {}).get("result", {}).get("result", []) if isinstance(answer, dict) else []
    return sum(1 for row in rows if isinstance(row, dict) and row.get("state") == "ALIVE")


def check_cluster(dashboard_url: str, token_ref: str | None = None, *,
                  timeout_s: float = HEALTH_TIMEOUT_S) -> ClusterHealth:
    """Ask the cluster's dashboard whether its job API answers and which nodes are alive."""
    headers = token_headers(token_ref)
    base = dashboard_url.rstrip("/")
    try:
        version = requests.get(f"{base}/api/version", headers=headers, timeout=timeout_s)
        if version.status_code != 200:
            return ClusterHealth(False, 0, f"job API answered {version.status_code}")
        nodes = requests.get(f"{base}/api/v0/nodes", params={"limit": 10_000}, headers=headers,
                             timeout=timeout_s)
        if nodes.status_code != 200:
            return ClusterHealth(False, 0, f"node list answered {nodes.status_code}")
        alive = alive_nodes(nodes.json())
    except (requests.RequestException, ValueError) as exc:
        return ClusterHealth(False, 0, f"{type(exc).__name__}: {str(exc)[:160]}")
    if alive == 0:
        return ClusterHealth(False, 0, "no node alive")
    return ClusterHealth(True, alive)
