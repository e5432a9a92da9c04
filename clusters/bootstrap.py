"""Nodes that boot into their workload cluster: the bootstrap every launched instance runs.

One template per cloud, readable in the repository (``clusters/aws/bootstrap.sh`` for EC2
``user_data``, ``clusters/gcp/startup.sh`` for the GCE ``startup-script``: each cloud's
metadata reads), the steps they share in ``clusters/bootstrap-common.sh``, rendered per launch
by :func:`render` with the instance type, accelerator, GPU count, market, the region's
:class:`ClusterJoin`, the launch's report credential and the API's URL. Every value is
shell-quoted into one assignment at the top of the script; the operator's hook is the one raw
part (a function body the script calls before Ray starts). The script carries
:mod:`clusters.nodewatch` verbatim, the preemption watcher that reports to the API.
"""

from __future__ import annotations

import shlex
import string
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from controlplane.core.errors import InvalidInput
from controlplane.core.models import Market
from controlplane.core.nodecreds import node_credential
from controlplane.core.workloadclusters import ClusterState, WorkloadCluster

HERE = Path(__file__).resolve().parent
TEMPLATES = {"aws": HERE / "aws" / "bootstrap.sh", "gcp": HERE / "gcp" / "startup.sh"}
COMMON = HERE / "bootstrap-common.sh"  # the steps every cloud shares, rendered into its file
CLOUD_PART = "# -- 2. who am I: the cloud's own part sets INSTANCE_ID"  # where COMMON is cut in two
WATCHER = HERE / "nodewatch.py"
TOKEN_SCHEMES = ("file:", "ssm:", "gcpsecret:")
SECRET_SCHEME = {"aws": "ssm:", "gcp": "gcpsecret:"}  # a bare secret name, per cloud
EMPTY_HOOK = "    :  # no operator hook"


class BootTemplate(string.Template):
    """``@@{name}`` placeholders: no clash with the shell's own ``$name``."""

    delimiter = "@@"


@dataclass(frozen=True)
class ClusterJoin:
    """The workload cluster a region's nodes join: its name, its GCS ``host:port`` and where a
    node reads its Ray token (``file:/path``, ``ssm:/parameter/name`` or
    ``gcpsecret:projects/P/secrets/S``)."""

    name: str
    gcs_address: str
    token_ref: str

    def __post_init__(self) -> None:
        if not self.token_ref.startswith(TOKEN_SCHEMES):
            raise InvalidInput("token_ref", f"{self.token_ref!r} has no known scheme",
                               fix=f"start it with one of {', '.join(TOKEN_SCHEMES)}")
        host, _, port = self.gcs_address.rpartition(":")
        if not host or not port.isdigit():
            raise InvalidInput("gcs_address", f"{self.gcs_address!r} is not host:port",
                               fix="e.g. 10.0.0.5:6379")


JoinMap = Mapping[str, ClusterJoin]  # region -> the workload cluster its nodes join
JoinSource = JoinMap | Callable[[], JoinMap]  # a fixed map, or one read again at each launch


@dataclass(frozen=True)
class NodeLaunch:
    """What one launch's bootstrap is rendered from."""

    cloud: str
    intent_id: str
    instance_type: str
    accelerator: str
    gpu_count: int
    market: Market


@dataclass(frozen=True)
class BootConfig:
    """A provider's bootstrap settings: the workload cluster of each region (a fixed map, or a
    callable read at each launch), the API URL the nodes report to, the control plane's report
    secret and the operator's hook."""

    joins: JoinSource
    api_url: str
    report_secret: str
    hook: str = ""
    ray_version: str = field(default_factory=lambda: pinned_ray())

    def __post_init__(self) -> None:
        if not self.api_url.startswith(("http://", "https://")):
            raise InvalidInput("api_url", f"{self.api_url!r} is not an http(s) URL",
                               fix="the URL the nodes reach the spotplane API at")
        if not self.report_secret:
            raise InvalidInput("node_report_secret", "empty",
                               fix="controlplane.core.nodecreds.report_secret(admin token hash)")

    @property
    def fixed(self) -> bool:
        """Whether the joins are a fixed map (checked when the fleet is built)."""
        return not callable(self.joins)

    def current_joins(self) -> JoinMap:
        """The region -> join map as it is now (a callable source is read again)."""
        return self.joins() if callable(self.joins) else self.joins

    def joinable(self, region: str) -> bool:
        """Whether a launch in ``region`` has a workload cluster to join now."""
        return region in self.current_joins()

    def join_for(self, region: str) -> ClusterJoin:
        """The region's workload cluster; a region without one is refused."""
        joins = self.current_joins()
        found = joins.get(region)
        if found is not None:
            return found
        if self.fixed:
            fix = f"add {region!r} to cluster_joins (one of {sorted(joins)})"
        else:
            fix = (f"register an active workload cluster in {region} with a GCS address and a "
                   f"token_ref (spotplane clusters add NAME --region {region} ...); regions with "
                   f"one: {sorted(joins) or 'none'}")
        raise InvalidInput("cluster_joins", f"no workload cluster for region {region}", fix=fix)

    def render(self, launch: NodeLaunch, region: str) -> str:
        """The bootstrap of one launch into ``region``'s workload cluster."""
        return render(launch, self.join_for(region), self.api_url,
                      node_credential(self.report_secret, launch.intent_id), self.hook,
                      self.ray_version)


def boot_config(joins: JoinSource | None, api_url: str | None,
                secret: str | None, hook: str | None,
                script: tuple[str, str | None]) -> BootConfig | None:
    """A fleet's bootstrap settings from its options (None without ``cluster_joins``); a
    hand-written ``script`` (its option's name and value) beside them is refused: the
    operator's additions go in ``boot_hook``."""
    if joins is None:
        return None
    name, given = script
    if given:
        raise InvalidInput(name, "given with cluster_joins: the bootstrap is the node's script",
                           fix="put your additions (mounts, drivers) in boot_hook")
    if not api_url or not secret:
        raise InvalidInput("api_url" if not api_url else "node_report_secret",
                           "needed with cluster_joins", fix="pass the API's URL and the report secret")
    return BootConfig(joins if callable(joins) else dict(joins), api_url, secret, hook or "")


def pinned_ray() -> str:
    """The Ray version nodes run: the one this control plane's package runs (its metadata)."""
    return metadata.version("ray")


def hook_body(hook: str) -> str:
    """The operator's hook as a function body (``:`` when empty)."""
    lines = [line for line in hook.strip("\n").splitlines()]
    if not any(line.strip() for line in lines):
        return EMPTY_HOOK
    return "\n".join(f"    {line}" if line.strip() else "" for line in lines)


def render(launch: NodeLaunch, join: ClusterJoin, api_url: str, credential: str,
           hook: str = "", ray_version: str | None = None, *,
           head: HeadPorts | None = None) -> str:
    """The cloud's template with this launch's values, each shell-quoted; with ``head``, the
    head variant (``ROLE=head``: ``ray start --head`` on those ports, the dashboard on)."""
    template = TEMPLATES.get(launch.cloud)
    if template is None:
        raise InvalidInput("cloud", f"no bootstrap template for {launch.cloud!r}",
                           fix=f"use one of {', '.join(sorted(TEMPLATES))}")
    values = {
        "cluster_name": join.name, "gcs_address": "" if head else join.gcs_address, "token_ref": join.token_ref,
        "api_url": api_url.rstrip("/"), "node_credential": credential,
        "instance_type": launch.instance_type, "accelerator": launch.accelerator,
        "gpu_count": str(int(launch.gpu_count)), "market": launch.market.value,
        "ray_version": ray_version or pinned_ray(),
        "role": "head" if head else "worker",
        "ray_port": str(head.ray_port) if head else "",
        "dashboard_port": str(head.dashboard_port) if head else "",
    }
    quoted = {k: shlex.quote(v) for k, v in values.items()}
    watcher = WATCHER.read_text()
    return BootTemplate(cloud_script(template)).substitute(
        quoted, nodewatch=watcher.rstrip("\n"), boot_hook=hook_body(hook))


def cloud_script(template: Path) -> str:
    """The cloud's file with the shared steps (``COMMON``) put in: the part before step 2 at
    ``@@{common_setup}``, the part after it at ``@@{common_join}``."""
    head, cut, tail = COMMON.read_text().partition(CLOUD_PART)
    if not cut:
        raise InvalidInput("template", f"{COMMON.name} has no '{CLOUD_PART}' line",
                           fix="keep the step-2 line that says where the cloud's part goes")
    tail = tail.split("\n", 1)[1] if "\n" in tail else ""
    return BootTemplate(template.read_text()).safe_substitute(
        common_setup=head.rstrip("\n"), common_join=tail.rstrip("\n"))


@dataclass(frozen=True)
class HeadPorts:
    """Where a launched head listens: its GCS (Ray) port and its dashboard (job API) port."""

    ray_port: int = 6379
    dashboard_port: int = 8265

    def __post_init__(self) -> None:
        for name, port in (("ray_port", self.ray_port), ("dashboard_port", self.dashboard_port)):
            if not 1 <= port <= 65535:
                raise InvalidInput(name, f"{port} is not a port", fix="a port in 1..65535")


def render_head(cloud: str, name: str, instance_type: str, token_ref: str, hook: str = "",
                ports: HeadPorts | None = None, ray_version: str | None = None) -> str:
    """The bootstrap of a workload cluster's head on one on-demand instance: the cloud's
    template as ``ROLE=head`` (no GCS to join, no API to report to, no credential)."""
    launch = NodeLaunch(cloud, f"head-{name}", instance_type, "", 0, Market.ON_DEMAND)
    join = ClusterJoin(name, "0.0.0.0:0", token_ref_for(cloud, token_ref))
    return render(launch, join, "", "", hook, ray_version, head=ports or HeadPorts())


def token_ref_for(cloud: str, ref: str) -> str:
    """A registry's token reference as a node reads it: an absolute path is ``file:``, a bare
    name is the cloud's secret store (``ssm:`` on AWS, ``gcpsecret:`` on GCP)."""
    if ref.startswith(TOKEN_SCHEMES):
        return ref
    if ref.startswith("/"):
        return f"file:{ref}"
    if cloud not in SECRET_SCHEME:
        raise InvalidInput("token_ref", f"{ref!r}: {cloud} has no secret store a node reads",
                           fix="give an absolute file path or a file:/ssm:/gcpsecret: reference")
    return f"{SECRET_SCHEME[cloud]}{ref}"


def joins_from(clusters: Iterable[WorkloadCluster], cloud: str) -> dict[str, ClusterJoin]:
    """Region -> the registered workload cluster of ``cloud`` its launched nodes join: the
    oldest active one there with a GCS address and a token reference."""
    joins: dict[str, ClusterJoin] = {}
    for c in clusters:
        if (c.cloud != cloud or c.state is not ClusterState.ACTIVE or c.gcs_address is None
                or c.token_ref is None or c.region in joins):
            continue
        joins[c.region] = ClusterJoin(c.name, c.gcs_address, token_ref_for(cloud, c.token_ref))
    return joins


class RegistryJoins:
    """A join source over a registry of workload clusters, read again when its copy is older
    than ``ttl_s``: a cluster registered after the fleet was built is joined at the next launch
    past that age."""

    def __init__(self, list_clusters: Callable[[], Iterable[WorkloadCluster]], cloud: str,
                 ttl_s: float = 5.0, now: Callable[[], float] = time.monotonic) -> None:
        self.list_clusters, self.cloud = list_clusters, cloud
        self.ttl_s, self.now = ttl_s, now
        self._read_at: float | None = None
        self._joins: dict[str, ClusterJoin] = {}

    def __call__(self) -> JoinMap:
        """Region -> join (:func:`joins_from` of the registry), at most ``ttl_s`` old."""
        now = self.now()
        if self._read_at is None or now - self._read_at >= self.ttl_s:
            self._joins = joins_from(self.list_clusters(), self.cloud)
            self._read_at = now
        return self._joins
