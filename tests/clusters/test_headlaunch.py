"""``clusters add --launch`` without a cloud: the head variant of each cloud's bootstrap as text,
and the bounded wait for a head against a provider that never answers (the instance is
terminated and the error names it with its console's last lines)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from clusters.bootstrap import TEMPLATES, HeadPorts, render_head
from clusters.fleet import Instance, InstanceState, LaunchRequest
from clusters.headlaunch import HeadDidNotAnswer, HeadRequest, HeadWait, head_fleet, launch_head
from controlplane.cli.clusters import fleet_options
from controlplane.core.errors import InvalidInput
from controlplane.core.models import Market


@pytest.mark.parametrize("cloud", sorted(TEMPLATES))
def test_the_head_variant_starts_a_head_and_keeps_the_operators_hook(cloud: str, tmp_path: Path) -> None:
    script = render_head(cloud, "east", "m5.2xlarge", "/etc/spotplane/east-token",
                         hook="mount /dev/nvme1n1 /scratch", ports=HeadPorts(6380, 8266))
    path = tmp_path / "head.sh"
    path.write_text(script)
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    for line in ("ROLE=head", "RAY_PORT=6380", "DASHBOARD_PORT=8266", "MARKET=on_demand",
                 "TOKEN_REF=file:/etc/spotplane/east-token", "NODE_CREDENTIAL=''", "GCS_ADDRESS=''"):
        assert f"\n{line}\n" in script, line
    assert 'ray.scripts.scripts start --head --port="$RAY_PORT"' in script
    assert "--include-dashboard=true" in script and 'RAY_AUTH_TOKEN_PATH="$NODE_DIR/ray_token"' in script
    assert "    mount /dev/nvme1n1 /scratch\n}" in script
    assert script.index("\noperator_hook\n") < script.index("scripts start --head")


class SilentFleet:
    """A provider whose one instance runs but whose head never answers."""

    name = "silent"

    def __init__(self) -> None:
        self.launched: list[LaunchRequest] = []
        self.terminated: list[str] = []

    def launch(self, request: LaunchRequest) -> list[Instance]:
        self.launched.append(request)
        return [self._instance()]

    def describe(self, instance_ids: Sequence[str] | None = None) -> list[Instance]:
        return [self._instance()]

    def terminate(self, instance_ids: Sequence[str]) -> None:
        self.terminated += list(instance_ids)

    def private_address(self, instance_id: str) -> str | None:
        return "10.9.9.9"

    def console_tail(self, instance_id: str, lines: int = 20) -> str:
        return "spotplane: Ray missing, installing\nbootstrap failed: exit 1 at line 90"

    def _instance(self) -> Instance:
        return Instance("i-0head", "aws", "us-east-1a", "m5.xlarge", Market.ON_DEMAND,
                        InstanceState.RUNNING, 0.0, 0.2)


def test_a_head_that_never_answers_is_terminated_and_named_with_its_console() -> None:
    fleet = SilentFleet()
    lines: list[str] = []
    wait = HeadWait(timeout_s=0.05, poll_s=0.01, progress=lines.append, probe=lambda ip, ports: False,
                    sleep=lambda s: None)
    with pytest.raises(HeadDidNotAnswer) as err:
        launch_head(fleet, HeadRequest("east", "aws", "us-east-1a", "m5.xlarge", "tok"), wait)  # type: ignore[arg-type]
    msg = str(err.value)
    assert "i-0head" in msg and "bootstrap failed: exit 1 at line 90" in msg and "terminated" in msg
    assert fleet.terminated == ["i-0head"]
    [asked] = fleet.launched
    assert asked.market is Market.ON_DEMAND and asked.count == 1 and asked.tags["role"] == "head"
    assert lines[0].startswith("launched i-0head") and "running at 10.9.9.9" in lines[1]


def test_fleet_options_are_json_or_text() -> None:
    assert fleet_options(["endpoint_url=http://x:1", "subnet_by_zone=[[\"a\", \"s\"]]", "seed=3"]) == {
        "endpoint_url": "http://x:1", "subnet_by_zone": [["a", "s"]], "seed": 3}
    with pytest.raises(InvalidInput):
        fleet_options(["novalue"])


def test_launch_flags_are_checked_before_anything_is_launched(capsys: pytest.CaptureFixture[str]) -> None:
    from controlplane.cli.main import main

    base = ["clusters", "add", "east", "--cloud", "aws", "--region", "us-east-1"]
    assert main([*base, "--launch", "--zone", "us-east-1a", "--token-ref", "t"]) != 0
    assert "--instance-type" in capsys.readouterr().err
    assert main([*base, "--launch", "--zone", "us-east-1a", "--instance-type", "m5.xlarge",
                 "--token-ref", "t", "--gcs-address", "10.0.0.1:6379"]) != 0
    assert "--gcs-address" in capsys.readouterr().err
    assert main(base) != 0  # by hand, the address is needed
    assert "--gcs-address" in capsys.readouterr().err


@pytest.mark.slow
def test_a_gcp_head_is_launched_on_demand_with_the_head_script_and_found_at_its_ip() -> None:
    from tests.clusters import test_gcp_controller as gcp

    fake = gcp.gce_fake.GceFake(project="spotplane-test", zones=("us-central1-a",))
    request = HeadRequest("central", "gcp", "us-central1-a", "n1-standard-8", "ray-token")
    with gcp.gce_fake.GceServer(fake) as server:
        fleet = head_fleet(request, {"project": "spotplane-test", "credentials": "anonymous",
                                     "api_endpoint": server.endpoint})
        lines: list[str] = []
        probed: list[str] = []

        def boot(_: float) -> None:  # while the command waits, GCE finishes booting the VM
            for _zone, name in list(fake.instances):
                fake.set_status(name, "RUNNING")

        wait = HeadWait(timeout_s=30, poll_s=0.01, progress=lines.append, sleep=boot,
                        probe=lambda ip, ports: probed.append(ip) is None)
        head = launch_head(fleet, request, wait)
        [vm] = [v for (_, name), v in fake.instances.items() if name == head.instance_id]
    items = {i["key"]: i["value"] for i in vm["metadata"]["items"]}
    assert "\nROLE=head\n" in items["startup-script"] and "\nCLOUD=gcp\n" in items["startup-script"]
    assert "\nTOKEN_REF=gcpsecret:ray-token\n" in items["startup-script"]
    assert vm["scheduling"].get("provisioningModel") != "SPOT"
    assert head.private_ip == vm["networkInterfaces"][0]["networkIP"] == probed[-1]
    assert head.gcs_address == f"{head.private_ip}:6379"
