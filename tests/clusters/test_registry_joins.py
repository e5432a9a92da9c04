"""A fleet whose joins are read from the registry at each launch: a workload cluster registered
after the fleet was built is joined by the next launch in its region (no restart), and a launch
in a region without one is refused at launch, naming the field and the fix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusters.bootstrap import ClusterJoin, RegistryJoins, boot_config
from clusters.fleet import LaunchRequest
from clusters.providers import make_provider
from controlplane.core.errors import InvalidInput
from controlplane.core.models import Market
from controlplane.core.nodecreds import report_secret
from controlplane.core.tokens import hash_token
from controlplane.core.workloadclusters import WorkloadClusterSpec
from controlplane.store import Store
from tests.clusters import gce_fake
from tests.clusters import test_aws_fleet as aws

moto_port, proxy, aws_env = aws.moto_port, aws.proxy, aws.aws_env  # fixtures

SECRET = report_secret(hash_token("sp_admin-token"))
API = "https://spotplane.example:8443"
ZONES = ("us-central1-a", "us-west1-a")


def register(store: Store, name: str, region: str, gcs: str, cloud: str = "gcp") -> None:
    store.add_cluster(WorkloadClusterSpec(name=name, cloud=cloud, region=region, gcs_address=gcs,
                                          dashboard_url=f"http://{gcs.split(':')[0]}:8265",
                                          token_ref="projects/p/secrets/ray-token"))


class Ticks:
    """A monotonic clock a test moves."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_source_is_read_again_once_its_copy_is_older_than_the_ttl(tmp_path: Path) -> None:
    store, ticks = Store(tmp_path / "spotplane.db"), Ticks()
    try:
        joins = RegistryJoins(store.list_clusters, "gcp", ttl_s=5.0, now=ticks)
        assert joins() == {}
        register(store, "central", "us-central1", "10.1.0.5:6379")
        assert joins() == {}  # the cached copy, within the ttl
        ticks.t = 5.0
        assert joins() == {"us-central1": ClusterJoin(
            "central", "10.1.0.5:6379", "gcpsecret:projects/p/secrets/ray-token")}
        config = boot_config(joins, API, SECRET, None, ("startup_script", None))
        assert config is not None and not config.fixed
        assert config.join_for("us-central1").name == "central"
        with pytest.raises(InvalidInput, match="register an active workload cluster in us-west1"):
            config.join_for("us-west1")
    finally:
        store.close()


@pytest.fixture
def gce() -> Iterator[tuple[gce_fake.GceFake, str]]:
    fake = gce_fake.GceFake(project="spotplane-test", zones=ZONES)
    with gce_fake.GceServer(fake) as server:
        yield fake, server.endpoint


def startup_script(fake: gce_fake.GceFake, name: str) -> str:
    [vm] = [v for (_, n), v in fake.instances.items() if n == name]
    return str({i["key"]: i["value"] for i in vm["metadata"]["items"]}["startup-script"])


@pytest.mark.slow
def test_a_cluster_registered_after_the_fleet_is_built_is_joined_at_the_next_launch(
        gce: tuple[gce_fake.GceFake, str], tmp_path: Path) -> None:
    fake, endpoint = gce
    store = Store(tmp_path / "spotplane.db")
    try:
        fleet: Any = make_provider(
            "gcp", project="spotplane-test", zones=list(ZONES), credentials="anonymous",
            api_endpoint=endpoint, machine_types=["g2-standard-4"], api_url=API,
            node_report_secret=SECRET, cluster_joins=RegistryJoins(store.list_clusters, "gcp", ttl_s=0.0))
        # built with no cluster anywhere: nothing offered, and a launch is refused
        assert fleet.offers() == []
        with pytest.raises(InvalidInput, match="cluster_joins") as refused:
            fleet.launch(LaunchRequest("launch-1", "us-central1-a", "g2-standard-4", Market.SPOT))
        assert "clusters add" in (refused.value.fix or "") and fake.names() == []

        register(store, "central", "us-central1", "10.1.0.5:6379")
        assert {o.zone for o in fleet.offers()} == {"us-central1-a"}
        [inst] = fleet.launch(LaunchRequest("launch-2", "us-central1-a", "g2-standard-4", Market.SPOT))
        script = startup_script(fake, inst.instance_id)
        assert "\nGCS_ADDRESS=10.1.0.5:6379\n" in script and "\nCLUSTER_NAME=central\n" in script

        with pytest.raises(InvalidInput, match="us-west1"):  # still none in the other region
            fleet.launch(LaunchRequest("launch-3", "us-west1-a", "g2-standard-4", Market.SPOT))
        assert fake.names() == [inst.instance_id]
    finally:
        store.close()


@pytest.mark.slow
def test_a_fixed_map_is_still_checked_when_the_fleet_is_built(gce: tuple[gce_fake.GceFake, str]) -> None:
    _, endpoint = gce
    central = ClusterJoin("central", "10.1.0.5:6379", "gcpsecret:projects/p/secrets/ray-token")
    with pytest.raises(InvalidInput, match="us-west1"):
        make_provider("gcp", project="spotplane-test", zones=list(ZONES), credentials="anonymous",
                      api_endpoint=endpoint, machine_types=["g2-standard-4"], api_url=API,
                      node_report_secret=SECRET, cluster_joins={"us-central1": central})


@pytest.mark.slow
def test_aws_user_data_names_a_cluster_registered_after_the_fleet_is_built(
        proxy: Any, aws_env: None, tmp_path: Path) -> None:
    import base64

    import boto3

    _, url = proxy
    store = Store(tmp_path / "spotplane.db")
    try:
        fleet: Any = make_provider(
            "aws", endpoint_url=url, zones=["us-east-1a"], instance_types=["g5.xlarge"],
            image_id="ami-12c6146b", api_url=API, node_report_secret=SECRET,
            cluster_joins=RegistryJoins(store.list_clusters, "aws", ttl_s=0.0))
        assert fleet.offers() == []
        with pytest.raises(InvalidInput, match="us-east-1"):
            fleet.launch(LaunchRequest("launch-1", "us-east-1a", "g5.xlarge", Market.SPOT))
        assert fleet.describe() == []  # refused before anything was launched
        register(store, "east", "us-east-1", "10.0.0.5:6379", cloud="aws")
        assert {o.zone for o in fleet.offers()} == {"us-east-1a"}
        [inst] = fleet.launch(LaunchRequest("launch-2", "us-east-1a", "g5.xlarge", Market.SPOT))
        ec2 = boto3.client("ec2", endpoint_url=url, region_name="us-east-1")
        attr = ec2.describe_instance_attribute(InstanceId=inst.instance_id, Attribute="userData")
        script = base64.b64decode(attr["UserData"]["Value"]).decode()
        assert "\nGCS_ADDRESS=10.0.0.5:6379\n" in script and "\nCLUSTER_NAME=east\n" in script
    finally:
        store.close()
