"""``spotplane clusters add --launch`` for real: the CLI launches the head's on-demand instance
through moto's server, the boot emulator runs that instance's actual ``user_data`` (the head
variant of the template) in its own network namespace at the address EC2 gave it, the CLI waits
until the head answers and registers the cluster at that address; a worker launched afterwards
with the registry's joins boots into it; ``clusters remove`` terminates the head."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clusters.bootstrap import joins_from
from clusters.fleet import LaunchRequest
from clusters.providers import make_provider
from controlplane.cli.main import main
from controlplane.core.models import Market
from controlplane.core.nodecreds import report_secret
from controlplane.core.tokens import hash_token
from tests.clusters import test_aws_controller as ctl_world
from tests.clusters.bootemu import (
    REPO,
    VENV_BIN,
    BootEmulator,
    Bridge,
    booted_ok,
    ec2_gone,
    ec2_private_ip,
    ec2_scripts,
    operator_token,
    run_while_booting,
)
from tests.clusters.test_boot_emulator import ApiServer
from tests.serve.bareapi import ADMIN_TOKEN, bare_api

pytestmark = [pytest.mark.ray, pytest.mark.slow]

aws = ctl_world.aws
moto_port, proxy, aws_env = ctl_world.moto_port, ctl_world.proxy, ctl_world.aws_env
HEAD_TYPE, GPU = "m5.xlarge", "g5.xlarge"


def head_resources(gcs: str, token_file: Path, timeout_s: float = 120.0) -> dict[str, float]:
    """The alive nodes' resources, from a driver that joins the head with its token."""
    code = (f"import json, ray\nray.init(address={gcs!r})\n"
            "print(json.dumps(ray.cluster_resources()))")
    env = {"PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(token_file.parent),
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout_s, check=False, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_launched_head_is_registered_and_a_later_worker_joins_it(
        bridge: Bridge, proxy: tuple[Any, str], aws_env: None, tmp_path: Path) -> None:
    import boto3

    url = proxy[1]
    ec2 = boto3.client("ec2", endpoint_url=url, region_name="us-east-1")
    vpc = ec2.create_vpc(CidrBlock=f"{bridge.subnet}.0/24")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=f"{bridge.subnet}.0/24",
                               AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    token_file = operator_token(tmp_path / "east-ray-token")
    scripts_of = [ec2_scripts(ec2, "spotplane-head"), ec2_scripts(ec2)]
    emu = BootEmulator(bridge, tmp_path, lambda: (s for of in scripts_of for s in of()), ec2_gone(ec2),
                       extra_env={"RAY_gcs_server_port_wait_time_s": "5"}, ip_of=ec2_private_ip(ec2))
    options = [f"--fleet-option=endpoint_url={url}", "--fleet-option=image_id=ami-12c6146b"]
    with bare_api(tmp_path) as built:
        api = ApiServer(built, bridge.host)
        client = ["--url", api.url, "--token", ADMIN_TOKEN]
        try:
            add = ["clusters", "add", "east", "--cloud", "aws", "--region", "us-east-1", "--launch",
                   "--zone", "us-east-1a", "--instance-type", HEAD_TYPE, "--token-ref", str(token_file),
                   "--launch-timeout", "300", *options,
                   f"--fleet-option=subnet_by_zone=[[\"us-east-1a\", \"{subnet}\"]]", *client]
            # EC2 boots what is pending; the emulator runs its user_data
            assert run_while_booting(lambda: main(add), lambda: (ctl_world.boot_pending(), emu.boot_new())) == 0
            [head] = emu.booted.values()
            booted_ok(head, 60)
            [east] = built.replica.service.base_store.list_clusters()
            assert east.gcs_address == f"{head.ip}:6379" and east.head_instance_id == head.instance_id
            assert east.dashboard_url == f"http://{head.ip}:8265" and east.zones == ["us-east-1a"]
            assert head.ip.startswith(f"{bridge.subnet}.")  # the address EC2 gave it
            assert head_resources(east.gcs_address, token_file)[f"spotplane_head:{head.instance_id}"] == 1.0

            fleet = make_provider(
                "aws", endpoint_url=url, zones=["us-east-1a"], instance_types=[GPU], image_id="ami-12c6146b",
                cluster_joins=joins_from(built.replica.service.base_store.list_clusters(), "aws"),
                api_url=api.url, node_report_secret=report_secret(hash_token(ADMIN_TOKEN)))
            [worker] = fleet.launch(LaunchRequest("launch-w1", "us-east-1a", GPU, Market.SPOT))
            ctl_world.boot_pending()
            [joined] = emu.boot_new()
            assert joined.instance_id == worker.instance_id
            booted_ok(joined)
            have = head_resources(east.gcs_address, token_file)
            assert have[f"spotplane_node:{worker.instance_id}"] == 1.0 and have["A10G"] >= 1.0

            assert main(["clusters", "remove", "east", *options, *client]) == 0
            assert aws.moto_backend().get_instance(head.instance_id).state == "terminated"
            assert built.replica.service.base_store.list_clusters() == []
        finally:
            emu.close()
            api.stop()
