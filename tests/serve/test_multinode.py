"""The API's replicas on different Ray nodes share everything through a PostgreSQL store: an
uploaded package, an Idempotency-Key and a tenant's request rate hold whichever replica answers
(real Ray nodes, real Serve HTTP, real PostgreSQL; the scenario is ``multinode_api.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.serve.multinode_api import BURST, RATE

pytestmark = [pytest.mark.ray, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def seen(pg_server, tmp_path_factory: pytest.TempPathFactory) -> dict:  # type: ignore[no-untyped-def]
    from tests.pgfixtures import fresh_database

    out = tmp_path_factory.mktemp("multinode") / "seen.json"
    with fresh_database(pg_server) as url:
        run = subprocess.run([sys.executable, "-m", "tests.serve.multinode_api", url, str(out)],
                             cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                             capture_output=True, text=True, timeout=540)
    assert run.returncode == 0 and out.is_file(), run.stderr[-3000:]
    found: dict = json.loads(out.read_text())
    return found


def test_the_two_replicas_run_on_different_ray_nodes(seen: dict) -> None:
    nodes = seen["replica_nodes"]
    assert len(nodes) == 2 and len(set(nodes.values())) == 2, nodes
    assert set(nodes.values()) <= set(seen["cluster_nodes"]) and len(seen["cluster_nodes"]) == 3


def test_a_package_uploaded_to_one_replica_is_usable_on_the_other(seen: dict) -> None:
    assert seen["package_put"]["status"] == 200
    for phase in ("package_get", "package_submits"):
        answers = seen[phase]
        assert len({a["replica"] for a in answers}) == 2, (phase, answers)
        assert all(a["status"] in (200, 201) for a in answers), (phase, answers)
    assert {a["replica"] for a in seen["package_submits"]} - {seen["package_put"]["replica"]}


def test_an_idempotency_key_retried_across_replicas_makes_one_job(seen: dict) -> None:
    answers = seen["idempotent"]
    assert len({a["replica"] for a in answers}) == 2, answers
    assert all(a["status"] == 201 for a in answers)
    assert len({a["body"]["id"] for a in answers}) == 1
    assert [a["replayed"] for a in answers] == [None] + ["true"] * (len(answers) - 1)
    assert seen["jobs_named_once"] == 1


def test_a_flooding_tenant_gets_one_budget_not_one_per_replica(seen: dict) -> None:
    sent, window = seen["flood"]["sent"], seen["flood"]["window_s"]
    accepted = sum(s["status"] == 200 for s in sent)
    bound = BURST + RATE * window  # one bucket: burst + rate x seconds
    assert len(sent) > bound + 2  # it sent more than one budget (about 3 x its rate)
    assert {s["status"] for s in sent} == {200, 429}
    assert len({s["replica"] for s in sent if s["status"] == 200}) == 2  # both replicas admitted
    assert accepted <= bound + 2, (accepted, bound)  # a replica each would admit about 2 x bound
    assert accepted >= 0.8 * bound, (accepted, bound)  # and the budget is not undercounted
