"""``spotplane clusters add --launch --fleet gcp`` for real: the CLI launches the head's standard
VM through the Compute fake, the boot emulator runs that VM's actual ``startup-script`` (the head
variant) in its own network namespace at the internal IP the fake gave it, the CLI registers the
cluster there; a worker launched afterwards by a fleet built BEFORE the registration (its joins
read from the registry at each launch) joins it; ``clusters remove`` deletes the head. A head
whose startup-script fails is deleted and named with its serial console's last lines."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusters.bootstrap import RegistryJoins
from clusters.fleet import LaunchRequest
from clusters.headlaunch import (
    HeadDidNotAnswer,
    HeadRequest,
    HeadWait,
    answers,
    head_fleet,
    launch_head,
)
from clusters.providers import make_provider
from controlplane.cli.main import main
from controlplane.core.models import Market
from controlplane.core.nodecreds import report_secret
from controlplane.core.tokens import hash_token
from tests.clusters import gce_fake
from tests.clusters.bootemu import (
    BootEmulator,
    Bridge,
    booted_ok,
    gce_boot_pending,
    gce_gone,
    gce_private_ip,
    gce_scripts,
    operator_token,
    run_while_booting,
)
from tests.clusters.test_boot_emulator import ApiServer
from tests.clusters.test_boot_head import head_resources
from tests.serve.bareapi import ADMIN_TOKEN, bare_api

PROJECT, ZONE, HEAD_TYPE, GPU = "spotplane-test", "us-central1-a", "n1-standard-8", "g2-standard-4"
MISSING_DISK = "/dev/disk/by-id/google-spotplane-missing-scratch"


@pytest.fixture
def gce(bridge: Bridge) -> Iterator[tuple[gce_fake.GceFake, str]]:
    """The Compute fake, handing out internal IPs on the bridge's subnet."""
    fake = gce_fake.GceFake(project=PROJECT, zones=(ZONE,), network_prefix=bridge.subnet)
    with gce_fake.GceServer(fake) as server:
        yield fake, server.endpoint


def emulator(bridge: Bridge, fake: gce_fake.GceFake, workdir: Path) -> BootEmulator:
    """Boots each VM's startup-script at its internal IP; the fake's serial console is its log."""
    emu = BootEmulator(bridge, workdir, gce_scripts(fake), gce_gone(fake),
                       extra_env={"RAY_gcs_server_port_wait_time_s": "5"}, ip_of=gce_private_ip(fake))
    fake.serial_output = emu.console
    return emu


@pytest.mark.ray
@pytest.mark.slow
def test_a_launched_gcp_head_is_registered_and_a_later_worker_joins_it(
        bridge: Bridge, gce: tuple[gce_fake.GceFake, str], tmp_path: Path) -> None:
    fake, endpoint = gce
    token_file = operator_token(tmp_path / "central-ray-token")
    emu = emulator(bridge, fake, tmp_path)
    options = [f"--fleet-option=project={PROJECT}", "--fleet-option=credentials=anonymous",
               f"--fleet-option=api_endpoint={endpoint}"]
    with bare_api(tmp_path) as built:
        api = ApiServer(built, bridge.host)
        client = ["--url", api.url, "--token", ADMIN_TOKEN]
        registry = built.replica.service.base_store.list_clusters
        try:
            # built before the cluster exists: its joins are read from the registry per launch
            workers = make_provider(
                "gcp", project=PROJECT, zones=[ZONE], credentials="anonymous", api_endpoint=endpoint,
                machine_types=[GPU], api_url=api.url, node_report_secret=report_secret(hash_token(ADMIN_TOKEN)),
                cluster_joins=RegistryJoins(registry, "gcp", ttl_s=0.0))
            add = ["clusters", "add", "central", "--cloud", "gcp", "--region", "us-central1", "--launch",
                   "--zone", ZONE, "--instance-type", HEAD_TYPE, "--token-ref", str(token_file),
                   "--launch-timeout", "300", *options, *client]
            # GCE boots what is pending; the emulator runs its startup-script
            assert run_while_booting(lambda: main(add), lambda: (gce_boot_pending(fake), emu.boot_new())) == 0
            [head] = emu.booted.values()
            booted_ok(head, 60)
            [central] = registry()
            assert head.ip == gce_private_ip(fake)(head.instance_id)  # the address GCE gave it
            assert head.ip.startswith(f"{bridge.subnet}.")
            assert central.gcs_address == f"{head.ip}:6379" and central.head_instance_id == head.instance_id
            assert central.dashboard_url == f"http://{head.ip}:8265" and central.zones == [ZONE]
            assert head_resources(central.gcs_address, token_file)[f"spotplane_head:{head.instance_id}"] == 1.0

            [worker] = workers.launch(LaunchRequest("launch-w1", ZONE, GPU, Market.SPOT))
            gce_boot_pending(fake)
            [joined] = emu.boot_new()
            assert joined.instance_id == worker.instance_id
            booted_ok(joined)
            have = head_resources(central.gcs_address, token_file)
            assert have[f"spotplane_node:{worker.instance_id}"] == 1.0 and have["L4"] >= 1.0

            assert main(["clusters", "remove", "central", *options, *client]) == 0
            assert head.instance_id not in fake.names() and worker.instance_id in fake.names()
            assert registry() == []
            assert emu.reap() == [head.instance_id]
        finally:
            emu.close()
            api.stop()


@pytest.mark.slow
def test_a_gcp_head_whose_startup_script_fails_is_deleted_and_named_with_its_serial_console(
        bridge: Bridge, gce: tuple[gce_fake.GceFake, str], tmp_path: Path) -> None:
    fake, endpoint = gce
    emu = emulator(bridge, fake, tmp_path)
    request = HeadRequest("central", "gcp", ZONE, HEAD_TYPE, str(tmp_path / "ray-token"),
                          hook=f"test -e {MISSING_DISK} || {{ echo 'no scratch disk'; exit 3; }}")
    fleet = head_fleet(request, {"project": PROJECT, "credentials": "anonymous", "api_endpoint": endpoint})
    lines: list[str] = []

    def boot_then_sleep(seconds: float) -> None:
        gce_boot_pending(fake)
        emu.boot_new()
        time.sleep(seconds)

    wait = HeadWait(timeout_s=20.0, poll_s=0.5, progress=lines.append, sleep=boot_then_sleep,
                    probe=lambda ip, ports: answers(ip, ports, timeout_s=1.0))
    try:
        with pytest.raises(HeadDidNotAnswer) as err:
            launch_head(fleet, request, wait)
        [booted] = emu.booted.values()
        assert booted.finished(60) != 0
        msg = str(err.value)
        assert booted.instance_id in msg and "it was terminated" in msg
        assert "no scratch disk\nbootstrap failed: exit 3" in msg, msg
        assert booted.instance_id not in fake.names()  # deleted, not left running and billed
        serial = [c for c in fake.calls if c[1].endswith(f"/instances/{booted.instance_id}/serialPort")]
        assert serial and serial[0][0] == "GET"
        assert emu.reap() == [booted.instance_id]
    finally:
        emu.close()


def test_the_serial_console_tail_is_the_last_lines_gcp_has(tmp_path: Path) -> None:
    fake = gce_fake.GceFake(project=PROJECT, zones=(ZONE,))
    fake.serial_output = lambda name: "".join(f"line {i} of {name}\n" for i in range(50))
    request = HeadRequest("central", "gcp", ZONE, HEAD_TYPE, "ray-token")
    with gce_fake.GceServer(fake) as server:
        fleet: Any = head_fleet(request, {"project": PROJECT, "credentials": "anonymous",
                                          "api_endpoint": server.endpoint})
        [vm] = fleet.launch(LaunchRequest("head-central-1", ZONE, HEAD_TYPE, Market.ON_DEMAND))
        tail = fleet.console_tail(vm.instance_id, lines=3)
        assert tail.splitlines() == [f"line {i} of {vm.instance_id}" for i in (47, 48, 49)]
        fleet.terminate([vm.instance_id])
        assert fleet.console_tail("sp-nosuchvm-0") == ""  # no zone has it
