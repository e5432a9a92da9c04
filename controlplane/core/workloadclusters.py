"""Workload Ray clusters: the registry's records, one per region or cloud that runs tenants' jobs.

A :class:`WorkloadCluster` names one Ray cluster (its GCS address and dashboard URL), where it
is (cloud, region, zones, node types) and how to authenticate to it (``token_ref``: a file path or
a secret's name, never the token itself). Its ``state`` is what placement reads: an ``active``
cluster takes new work, a ``draining`` one finishes what runs and takes nothing new, an
``unhealthy`` one takes nothing and its jobs are at risk.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

FAILURE_THRESHOLD = 3  # failed checks in a row that make a cluster unhealthy (a slow answer is not)
LOCAL_CLUSTER = "local"  # the workload Ray that `spotplane up` starts on this machine
NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
_ADDRESS_PATTERN = r"^[A-Za-z0-9_.\-\[\]:]+:[0-9]{1,5}$"
_URL_PATTERN = r"^https?://[^\s]+$"
_ZONE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"


def dashboard_url_of(address: str) -> str:
    """A Ray dashboard address as a URL (``HOST:PORT`` gains ``http://``)."""
    return address if "://" in address else f"http://{address}"


PlaceName = Annotated[str, Field(min_length=1, max_length=64, pattern=_ZONE_PATTERN)]


class ClusterState(StrEnum):
    """Whether a workload cluster takes new work."""

    ACTIVE = "active"  # healthy: takes new work
    DRAINING = "draining"  # finishes what runs, takes nothing new
    UNHEALTHY = "unhealthy"  # its job API or node list did not answer: nothing new, jobs at risk


class WorkloadClusterSpec(BaseModel):
    """What an admin gives to register a workload cluster."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN,
                      description="Unique cluster name (lowercase letters, digits, -).")
    cloud: str = Field(min_length=1, max_length=32, pattern=r"^[a-z0-9][a-z0-9_-]*$",
                       description="Cloud the cluster runs in (aws, gcp, local, ...).")
    region: str = Field(min_length=1, max_length=64, pattern=_ZONE_PATTERN,
                        description="Region of the cluster (us-east-1, us-central1, ...).")
    gcs_address: str | None = Field(
        default=None, max_length=255, pattern=_ADDRESS_PATTERN,
        description="The Ray GCS address nodes join: HOST:PORT (None: jobs only, no joins).")
    dashboard_url: str = Field(max_length=255, pattern=_URL_PATTERN,
                               description="The Ray dashboard (job API) URL: http(s)://HOST:PORT.")
    token_ref: str | None = Field(
        default=None, min_length=1, max_length=255, pattern=r"^[^\s]+$",
        description="Where the cluster's Ray token is: a file path or a secret's name; never the "
                    "token itself.")
    zones: list[PlaceName] = Field(default_factory=list, max_length=64,
                                   description="Zones the cluster's nodes run in.")
    node_types: list[PlaceName] = Field(default_factory=list, max_length=64,
                                        description="Instance types the cluster offers.")
    head_instance_id: str | None = Field(
        default=None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$",
        description="The head's instance when spotplane launched it (clusters add --launch): "
                    "removing the cluster terminates it.")
    ray_config: str | None = Field(
        default=None, min_length=1, max_length=1024, pattern=r"^[^\s]+$",
        description="The cluster-launcher YAML `ray up` started it from: its autoscaler is "
                    "asked for nodes (fleet ray-clusters).")

    @field_validator("zones", "node_types")
    @classmethod
    def _once(cls, values: list[str]) -> list[str]:
        """Each name once, in the order given."""
        return list(dict.fromkeys(values))


class WorkloadCluster(WorkloadClusterSpec):
    """A registered workload cluster with its health."""

    model_config = ConfigDict(extra="ignore")

    state: ClusterState = ClusterState.ACTIVE
    registered_at: float = 0.0
    checked_at: float | None = None  # last health check (control-plane seconds)
    health_message: str = ""  # why the last check failed ('' when it passed)
    nodes_alive: int = 0  # the Ray nodes the last check listed
    failed_checks: int = 0  # health checks failed in a row (unhealthy from FAILURE_THRESHOLD)

    @property
    def takes_work(self) -> bool:
        """New jobs and replicas may be placed here."""
        return self.state is ClusterState.ACTIVE
