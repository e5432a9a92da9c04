"""The boot emulator on GCP: GcpFleet launches through the local Compute API (``gce_fake``), and
each VM's actual ``startup-script`` runs in its own network namespace, reading its name from a
fake ``metadata.google.internal``; its real ``ray start`` joins the local workload Ray."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusters.bootstrap import ClusterJoin
from clusters.providers import make_provider
from controlplane.core.clock import SimClock
from controlplane.core.models import JobState, NodeState
from controlplane.core.nodecreds import report_secret
from controlplane.core.tokens import hash_token
from controlplane.reconcile.contracts import ControllerSettings
from controlplane.reconcile.controller import Controller
from controlplane.store import Store
from tests.clusters import test_boot_emulator as emulated
from tests.clusters import test_gcp_controller as gcp_world
from tests.clusters.bootemu import Booted, BootEmulator, booted_ok, gce_gone, gce_scripts
from tests.serve.bareapi import ADMIN_TOKEN, bare_api

pytestmark = [pytest.mark.ray, pytest.mark.slow]

cluster = emulated.cluster
Cluster, World, ApiServer, boot_job = emulated.Cluster, emulated.World, emulated.ApiServer, emulated.boot_job
ZONES = ["us-central1-a"]


@pytest.fixture
def world(cluster: Any, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    fake = gcp_world.gce_fake.GceFake(project="spotplane-test", zones=tuple(ZONES))
    token_file = tmp_path / "central-ray-token"
    token_file.write_text(cluster.head.token_file.read_text())

    def finish_boot() -> None:
        for (_, name), inst in list(fake.instances.items()):
            if inst["status"] in ("PROVISIONING", "STAGING"):
                fake.set_status(name, "RUNNING")

    with gcp_world.gce_fake.GceServer(fake) as server, bare_api(tmp_path) as built:
        api = ApiServer(built, cluster.bridge.host)
        clock = SimClock(start=1_700_000_000.0)
        join = ClusterJoin("central", cluster.head.address, f"file:{token_file}")
        fleet = make_provider(
            "gcp", project="spotplane-test", zones=ZONES, credentials="anonymous",
            api_endpoint=server.endpoint, clock=clock, seed=2, machine_types=["g2-standard-4"],
            cluster_joins={"us-central1": join}, api_url=api.url,
            node_report_secret=report_secret(hash_token(ADMIN_TOKEN)))
        store = Store(tmp_path / "spotplane.db")
        ctl = Controller(store, fleet, clock, ControllerSettings(pool_nodes={"L4": 4}),
                         epoch=store.take_controller_lease())
        emu = BootEmulator(cluster.bridge, tmp_path, gce_scripts(fake), gce_gone(fake),
                           extra_env={"RAY_gcs_server_port_wait_time_s": "5"})
        try:
            yield fake, World(clock, store, ctl, emu, api, built.tenant_id, token_file, finish_boot, "L4")
        finally:
            emu.close()
            api.stop()
            store.close()


def test_a_vm_joins_reports_its_preemption_and_the_job_runs_on_the_next(world: Any, cluster: Any) -> None:
    fake, w = world
    job_id, node, booted = boot_job(w)
    have = cluster.head.resources()
    assert have[f"spotplane_node:{node.instance_id}"] == 1.0 and have["L4"] >= 1.0
    assert cluster.head.run_pinned(f"spotplane_node:{node.instance_id}") == booted.ip

    booted.notice("TRUE")  # the metadata server's instance/preempted turns TRUE
    emulated.wait_for_report(w, node.instance_id)
    w.step()
    assert next(n for n in w.store.list_nodes() if n.id == node.id).state is NodeState.NOTICED

    fake.preempt(node.instance_id)
    fake.finish_preemption(node.instance_id)  # deleted: its namespace goes
    started: list[Booted] = []
    for _ in range(8):
        started += w.step()
        if started:
            break
    assert node.instance_id not in w.emu.booted
    [again] = started
    booted_ok(again)
    w.step()
    assert w.store.get_job(job_id).state is JobState.RUNNING
    assert cluster.head.run_pinned(f"spotplane_node:{again.instance_id}") == again.ip


def test_a_vm_whose_token_is_wrong_is_failed_and_deleted(world: Any) -> None:
    fake, w = world
    w.token_file.write_text("0" * 64)
    job_id = w.submit()
    started: list[Booted] = []
    for _ in range(6):
        started += w.step()
        if started:
            break
    [bad] = started
    assert bad.finished(240) != 0
    w.step()
    failed = next(n for n in w.store.list_nodes() if n.instance_id == bad.instance_id)
    assert failed.state is NodeState.FAILED
    assert bad.instance_id not in fake.names()  # GcpFleet deleted the VM
    events = [e for e in w.store.job_events(job_id) if e.node_id == failed.id and e.dst == "FAILED"]
    assert events and "bootstrap failed" in events[0].cause, json.dumps([e.cause for e in events])
