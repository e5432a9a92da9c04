"""The bootstrap every launched node runs, as text (what the rendered script holds, ``bash -n``
clean) and through the providers (AWS ``UserData`` over moto's server, the GCE fake's
``startup-script``), and the watcher it carries against a fake metadata server and API."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from clusters import nodewatch
from clusters.bootstrap import (
    TEMPLATES,
    BootConfig,
    ClusterJoin,
    NodeLaunch,
    boot_config,
    pinned_ray,
    render,
)
from controlplane.core.errors import InvalidInput
from controlplane.core.models import Market
from controlplane.core.nodecreds import credential_matches, node_credential, report_secret
from controlplane.core.tokens import hash_token
from tests.clusters import test_aws_fleet as aws

moto_port, proxy, aws_env = aws.moto_port, aws.proxy, aws.aws_env  # fixtures

ADMIN = "spa_admin-token-never-on-a-node"
SECRET = report_secret(hash_token(ADMIN))
EAST = ClusterJoin("east", "10.0.0.5:6379", "ssm:/spotplane/east/ray-token")
API = "https://spotplane.example:8443"
LAUNCH = NodeLaunch("aws", "launch-abc", "g5.12xlarge", "A10G", 4, Market.SPOT)


def rendered(launch: NodeLaunch = LAUNCH, join: ClusterJoin = EAST, hook: str = "") -> str:
    return render(launch, join, API, node_credential(SECRET, launch.intent_id), hook)


def bash_n(script: str, tmp_path: Path) -> None:
    path = tmp_path / "boot.sh"
    path.write_text(script)
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("cloud", sorted(TEMPLATES))
def test_each_cloud_renders_a_clean_script_with_the_launch(cloud: str, tmp_path: Path) -> None:
    launch = NodeLaunch(cloud, "launch-abc", "g5.12xlarge", "A10G", 4, Market.ON_DEMAND)
    script = rendered(launch)
    bash_n(script, tmp_path)
    assert script.startswith("#!/bin/bash\n") and "@@" not in script
    for line in (f"CLOUD={cloud}", "CLUSTER_NAME=east", "GCS_ADDRESS=10.0.0.5:6379",
                 "TOKEN_REF=ssm:/spotplane/east/ray-token", f"API_URL={API}",
                 "INSTANCE_TYPE=g5.12xlarge", "ACCELERATOR=A10G", "GPU_COUNT=4",
                 "MARKET=on_demand", f"RAY_VERSION={pinned_ray()}",
                 f"NODE_CREDENTIAL={node_credential(SECRET, 'launch-abc')}"):
        assert f"\n{line}\n" in script, line
    assert 'spotplane_node:$INSTANCE_ID' in script and '\\"$MARKET\\": 1' in script
    assert 'ray.scripts.scripts start --address="$GCS_ADDRESS"' in script
    assert "RAY_AUTH_MODE=token" in script and 'RAY_AUTH_TOKEN_PATH="$NODE_DIR/ray_token"' in script
    assert "aws ssm get-parameter" in script and "--with-decryption" in script
    assert "gcloud secrets versions access latest" in script
    assert "nodewatch.py\" watch" in script and "trap 'report_failure $?' EXIT" in script
    assert nodewatch.__doc__ is not None and Path(nodewatch.__file__).read_text().rstrip() in script
    if cloud == "aws":  # IMDSv2: the instance id, and the region the SSM parameter is read in
        assert "INSTANCE_ID=$(imds instance-id)" in script and "latest/api/token" in script
        assert '--region "$(imds placement/region)"' in script
    else:
        assert "computeMetadata/v1/instance/name" in script and "Metadata-Flavor: Google" in script


def test_never_the_admin_token_and_values_are_quoted(tmp_path: Path) -> None:
    hostile = ClusterJoin("east; rm -rf /", "10.0.0.5:6379", "file:/etc/x $(reboot)")
    script = rendered(join=hostile)
    bash_n(script, tmp_path)
    assert ADMIN not in script and hash_token(ADMIN) not in script and SECRET not in script
    assert "\nCLUSTER_NAME='east; rm -rf /'\n" in script
    assert "\nTOKEN_REF='file:/etc/x $(reboot)'\n" in script


def test_the_operator_hook_is_added_not_a_replacement(tmp_path: Path) -> None:
    script = rendered(hook="mount /dev/nvme1n1 /scratch\nmodprobe nvidia")
    bash_n(script, tmp_path)
    body = script[script.index("operator_hook() {"):script.index("\noperator_hook\n")]
    assert "    mount /dev/nvme1n1 /scratch\n    modprobe nvidia\n}" in body
    assert "/etc/spotplane/boot.d/*.sh" in script
    assert script.index("operator_hook\n") < script.index("ray.scripts.scripts start")
    assert "    :  # no operator hook" in rendered()


def test_credentials_are_per_launch_and_compared_in_full() -> None:
    mine = node_credential(SECRET, "launch-a")
    assert credential_matches(SECRET, "launch-a", mine)
    assert not credential_matches(SECRET, "launch-b", mine)
    assert not credential_matches(report_secret(hash_token("spa_other")), "launch-a", mine)
    assert not credential_matches(SECRET, "launch-a", mine[:-1]) and not credential_matches(SECRET, "launch-a", None)


def test_bad_joins_and_options_are_refused() -> None:
    with pytest.raises(InvalidInput, match="token_ref"):
        ClusterJoin("east", "10.0.0.5:6379", "vault:/x")
    with pytest.raises(InvalidInput, match="gcs_address"):
        ClusterJoin("east", "10.0.0.5", "file:/t")
    with pytest.raises(InvalidInput, match="boot_hook"):
        boot_config({"us-east-1": EAST}, API, SECRET, None, ("user_data", "#!/bin/sh\nray start"))
    with pytest.raises(InvalidInput, match="api_url"):
        boot_config({"us-east-1": EAST}, None, SECRET, None, ("user_data", None))
    config = boot_config({"us-east-1": EAST}, API, SECRET, None, ("user_data", None))
    assert isinstance(config, BootConfig)
    with pytest.raises(InvalidInput, match="eu-west-1"):
        config.join_for("eu-west-1")
    assert boot_config(None, None, None, None, ("user_data", "x")) is None


# -- through the providers -------------------------------------------------------------------------
@pytest.mark.slow
def test_aws_launch_sends_the_rendered_bootstrap_as_user_data(proxy: Any, aws_env: None,
                                                              tmp_path: Path) -> None:
    import boto3

    from clusters.fleet import LaunchRequest
    from clusters.providers import make_provider

    _, url = proxy
    fleet = make_provider("aws", endpoint_url=url, zones=["us-east-1a"], instance_types=["g5.xlarge"],
                          image_id="ami-12c6146b", cluster_joins={"us-east-1": EAST}, api_url=API,
                          node_report_secret=SECRET, boot_hook="echo hook-ran")
    [inst] = fleet.launch(LaunchRequest("launch-42", "us-east-1a", "g5.xlarge", Market.SPOT, 1, {}))
    ec2 = boto3.client("ec2", endpoint_url=url, region_name="us-east-1")
    attr = ec2.describe_instance_attribute(InstanceId=inst.instance_id, Attribute="userData")
    script = base64.b64decode(attr["UserData"]["Value"]).decode()
    bash_n(script, tmp_path)
    assert "\nCLUSTER_NAME=east\n" in script and "\nMARKET=spot\n" in script
    assert "\nACCELERATOR=A10G\n" in script and "\nGPU_COUNT=1\n" in script
    assert f"\nNODE_CREDENTIAL={node_credential(SECRET, 'launch-42')}\n" in script
    assert "    echo hook-ran\n" in script
    with pytest.raises(InvalidInput, match="us-east-1"):
        make_provider("aws", endpoint_url=url, zones=["us-east-1a"], instance_types=["g5.xlarge"],
                      cluster_joins={"eu-west-1": EAST}, api_url=API, node_report_secret=SECRET)


@pytest.mark.slow
def test_gcp_launch_sends_the_rendered_bootstrap_as_startup_script(tmp_path: Path) -> None:
    from clusters.fleet import LaunchRequest
    from clusters.providers import make_provider
    from tests.clusters import test_gcp_controller as gcp

    central = ClusterJoin("central", "10.1.0.5:6379", "gcpsecret:projects/p/secrets/ray-token")
    fake = gcp.gce_fake.GceFake(project="spotplane-test", zones=("us-central1-a",))
    with gcp.gce_fake.GceServer(fake) as server:
        fleet = make_provider("gcp", project="spotplane-test", zones=["us-central1-a"],
                              credentials="anonymous", api_endpoint=server.endpoint,
                              machine_types=["g2-standard-4"], cluster_joins={"us-central1": central},
                              api_url=API, node_report_secret=SECRET)
        [inst] = fleet.launch(LaunchRequest("launch-7", "us-central1-a", "g2-standard-4",
                                            Market.SPOT, 1, {}))
        [vm] = [v for (_, name), v in fake.instances.items() if name == inst.instance_id]
    items = {i["key"]: i["value"] for i in vm["metadata"]["items"]}
    script = items["startup-script"]
    bash_n(script, tmp_path)
    assert "\nCLOUD=gcp\n" in script and "\nCLUSTER_NAME=central\n" in script
    assert "\nACCELERATOR=L4\n" in script and "\nGPU_COUNT=1\n" in script
    assert f"\nNODE_CREDENTIAL={node_credential(SECRET, 'launch-7')}\n" in script
    with pytest.raises(InvalidInput, match="startup_script"):
        make_provider("gcp", project="p", zones=["us-central1-a"], credentials="anonymous",
                      api_endpoint=server.endpoint, cluster_joins={"us-central1": central},
                      api_url=API, node_report_secret=SECRET, startup_script="#!/bin/sh")


# -- the watcher the bootstrap carries ----------------------------------------------------------------
class Fakes:
    """A metadata server (AWS or GCP paths) and an API that records what nodes POST."""

    def __init__(self) -> None:
        self.notice: str | None = None
        self.posts: list[tuple[str, str, dict[str, Any]]] = []

    def handler(self) -> type[BaseHTTPRequestHandler]:
        fakes = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def answer(self, status: int, body: str) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def do_PUT(self) -> None:
                self.answer(200, "imds-token")

            def do_GET(self) -> None:
                if self.path.endswith(("/instance-id", "/instance/name")):
                    self.answer(200, "i-0abc")
                elif self.path.endswith("/spot/instance-action"):
                    self.answer(404, "") if fakes.notice is None else self.answer(200, fakes.notice)
                elif self.path.endswith("/instance/preempted"):
                    self.answer(200, "FALSE" if fakes.notice is None else "TRUE")
                else:
                    self.answer(404, "")

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fakes.posts.append((self.path, self.headers["Authorization"], body))
                self.answer(202, "{}")

        return Handler


@pytest.fixture
def fakes() -> Iterator[tuple[Fakes, str]]:
    state = Fakes()
    server = ThreadingHTTPServer(("127.0.0.1", 0), state.handler())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_watcher_reports_the_notice_once_with_the_credential(cloud: str, fakes: tuple[Fakes, str],
                                                             tmp_path: Path) -> None:
    state, url = fakes
    cred = tmp_path / "credential"
    cred.write_text("spn_mine\n")
    argv = ["watch", "--cloud", cloud, "--api", url, "--metadata", url, "--credential-file",
            str(cred), "--poll-s", "0.05"]
    done: list[int] = []
    thread = threading.Thread(target=lambda: done.append(nodewatch.main(argv)), daemon=True)
    thread.start()
    thread.join(0.3)
    assert not done and not state.posts  # no notice yet: still watching
    state.notice = '{"action": "terminate", "time": "2099-01-01T00:00:00Z"}'
    thread.join(10)
    assert done == [0]
    [(path, auth, body)] = state.posts
    assert path == "/v1/nodes/i-0abc/notice" and auth == "Bearer spn_mine"
    assert body["action"] == ("terminate" if cloud == "aws" else "preempted") and body["seconds_left"] > 0


def test_watcher_reports_a_failed_boot_with_the_log_tail(fakes: tuple[Fakes, str], tmp_path: Path) -> None:
    state, url = fakes
    cred, log = tmp_path / "credential", tmp_path / "boot.log"
    cred.write_text("spn_mine")
    log.write_text("x" * 10_000 + "\nray start: authentication failed\n")
    rc = nodewatch.main(["fail", "--cloud", "aws", "--api", url, "--metadata", url,
                         "--credential-file", str(cred), "--log", str(log)])
    assert rc == 0
    [(path, _, body)] = state.posts
    assert path == "/v1/nodes/i-0abc/boot-failure" and body["reason"] == "bootstrap failed"
    assert body["log_tail"].endswith("authentication failed\n") and len(body["log_tail"]) == nodewatch.TAIL_CHARS


def test_the_clouds_share_one_common_part_and_keep_their_own_metadata_reads() -> None:
    from clusters.bootstrap import COMMON

    common = COMMON.read_text()
    assert "report_failure()" in common and "operator_hook()" in common and "imds" not in common
    scripts = {cloud: rendered(NodeLaunch(cloud, "launch-abc", "g5.12xlarge", "A10G", 4, Market.SPOT))
               for cloud in TEMPLATES}
    for cloud, path in TEMPLATES.items():
        own = path.read_text()
        assert "report_failure" not in own and "ray.scripts.scripts" not in own  # not copied
        assert "@@{common_setup}" in own and "@@{common_join}" in own
        assert scripts[cloud].count("report_failure() {") == 1
    shared = scripts["aws"][scripts["aws"].index("CLUSTER_NAME="):scripts["aws"].index("# -- 2. who am I")]
    assert shared in scripts["gcp"]


def test_a_failing_hook_is_reported_with_its_line(fakes: tuple[Fakes, str], tmp_path: Path) -> None:
    """The real script, run as a program against the fake metadata server and API: the
    operator's hook fails, the node reports its boot as failed, naming the hook's command."""
    state, url = fakes
    launch = NodeLaunch("aws", "launch-hook", "g5.12xlarge", "A10G", 4, Market.SPOT)
    script = render(launch, EAST, url, node_credential(SECRET, launch.intent_id),
                    "echo mounting scratch\ntest -d /no/such/scratch/disk")
    path = tmp_path / "boot.sh"
    path.write_text(script)
    env = {"PATH": os.environ["PATH"], "SPOTPLANE_STATE_DIR": str(tmp_path / "state"),
           "SPOTPLANE_METADATA_URL": url, "SPOTPLANE_PYTHON": sys.executable}
    done = subprocess.run(["bash", str(path)], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert done.returncode != 0, done.stdout
    [(where, auth, body)] = state.posts
    assert where == "/v1/nodes/i-0abc/boot-failure" and auth == f"Bearer {node_credential(SECRET, 'launch-hook')}"
    assert "mounting scratch" in body["log_tail"]
    assert "test -d /no/such/scratch/disk" in body["log_tail"]  # the failing line, named
