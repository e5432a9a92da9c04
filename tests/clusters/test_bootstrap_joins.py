"""The registry of workload clusters feeds the launched nodes' bootstrap: each region of a cloud
joins its registered cluster, and `spotplane up` hands the fleet the secret the API checks."""

from __future__ import annotations

import pytest

from clusters.bootstrap import ClusterJoin, joins_from, token_ref_for
from controlplane.cli.up import boot_options
from controlplane.core.errors import InvalidInput
from controlplane.core.nodecreds import credential_matches, node_credential, report_secret
from controlplane.core.tokens import hash_token
from controlplane.core.workloadclusters import ClusterState, WorkloadCluster


def cluster(name: str, cloud: str, region: str, **kw: object) -> WorkloadCluster:
    base: dict[str, object] = {"name": name, "cloud": cloud, "region": region,
                               "gcs_address": f"10.0.{len(name)}.1:6379",
                               "dashboard_url": "http://10.0.0.1:8265", "token_ref": "/etc/ray/token"}
    return WorkloadCluster(**(base | kw))


def test_each_region_joins_its_oldest_active_cluster_of_the_cloud() -> None:
    registry = [cluster("east-a", "aws", "us-east-1"), cluster("east-b", "aws", "us-east-1"),
                cluster("west", "aws", "us-west-2", state=ClusterState.DRAINING),
                cluster("gce", "gcp", "us-central1"), cluster("jobs-only", "aws", "eu-west-1",
                                                             gcs_address=None)]
    joins = joins_from(registry, "aws")
    assert joins == {"us-east-1": ClusterJoin("east-a", "10.0.6.1:6379", "file:/etc/ray/token")}
    assert set(joins_from(registry, "gcp")) == {"us-central1"}


def test_a_bare_secret_name_is_the_clouds_secret_store() -> None:
    assert token_ref_for("aws", "spotplane/ray-token") == "ssm:spotplane/ray-token"
    assert token_ref_for("gcp", "projects/p/secrets/ray") == "gcpsecret:projects/p/secrets/ray"
    assert token_ref_for("aws", "ssm:/x") == "ssm:/x"
    with pytest.raises(InvalidInput, match="token_ref"):
        token_ref_for("local", "ray-token")


def test_up_gives_booting_fleets_the_secret_the_api_checks() -> None:
    admin = "sp_admin-token"
    opts = boot_options("aws", admin, "https://spotplane.example.com")
    assert opts["api_url"] == "https://spotplane.example.com"
    # the API recomputes a launch's credential from the admin token's hash it holds
    issued = node_credential(opts["node_report_secret"], "intent-1")
    assert credential_matches(report_secret(hash_token(admin)), "intent-1", issued)
    assert not credential_matches(report_secret(hash_token(admin)), "intent-2", issued)
    assert boot_options("aws", admin, None) == {} and boot_options("sim", admin, "https://x") == {}
