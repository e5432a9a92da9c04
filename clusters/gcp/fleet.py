"""GCP Compute Engine fleet provider (google-cloud-compute, REST transport): Spot and standard VMs.

Calls made (and nothing else): ``instances.insert``, ``instances.get``, ``instances.list``,
``instances.delete``, ``zoneOperations.wait``, ``zoneOperations.list``,
``machineTypes.get`` and, for a launched head that does not answer,
``instances.getSerialPortOutput``.

- Spot VMs carry ``scheduling.provisioningModel = SPOT`` and an
  ``instanceTerminationAction`` (``DELETE`` by default, like an AWS one-time spot request);
  standard VMs ``STANDARD``. GPU machine types that do not bundle GPUs (N1) get
  ``guestAccelerators`` and ``onHostMaintenance = TERMINATE``.
- Idempotency: instance names derive from the intent id, every insert carries a ``requestId``
  (a UUID derived from the intent, so a retried insert is the same operation for GCE), and the
  provider first lists instances already labelled with that intent.
- Preemptions: zone operations with ``operationType = compute.instances.preempted`` (the event
  in the Google preemption dataset) and instance status.
- ``ZONE_RESOURCE_POOL_EXHAUSTED(_WITH_DETAILS)``, ``QUOTA_EXCEEDED`` and stockouts raise
  :class:`CapacityUnavailable`; ``rateLimitExceeded`` / 429 / 5xx are retried with jittered backoff
  on the control-plane clock (the client library's own retries are off).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import random
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from clusters.bootstrap import BootConfig, JoinSource, NodeLaunch, boot_config
from clusters.cloudcalls import Backoff
from clusters.fleet import (
    EventKind,
    FleetEvent,
    FleetProvider,
    Instance,
    InstanceState,
    LaunchRequest,
    Offer,
    typed_options,
)
from clusters.gcp.catalog import ATTACHED_GPUS, PRICES, gpu_name, list_prices, url_name
from clusters.gcp.lifetime import spot_lifetimes
from clusters.gcp.notices import NOTICE_SECONDS, GcpPreemptionWatcher
from clusters.providers import Capability, fleet_provider
from clusters.statediff import StateDiffer
from controlplane.core.clock import Clock, WallClock
from controlplane.core.config import comma_list, load_settings
from controlplane.core.errors import CapacityUnavailable, CloudError, CredentialsError, InvalidInput
from controlplane.core.models import Market

log = logging.getLogger(__name__)

CLOUD = "gcp"
PREEMPTED_OP = "compute.instances.preempted"
CAPACITY_CODES = frozenset({
    "ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "QUOTA_EXCEEDED",
    "RESOURCE_EXHAUSTED", "STOCKOUT", "insufficientCapacity", "quotaExceeded",
})
RATE_REASONS = frozenset({"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED"})
GONE_MEMORY_S = 3600.0  # how long a vanished VM stays in describe() (AWS keeps terminated ones ~1 h)
NAMESPACE = uuid.UUID("6f1c2f0e-8a53-4d59-9a0b-5e2b3c7d9a11")

CapacityProbe = Callable[[str, str], bool]


def label_value(text: str) -> str:
    """A GCE label value (<= 63 of [a-z0-9_-]) for arbitrary text; long or odd text is hashed."""
    clean = re.sub(r"[^a-z0-9_-]", "-", text.lower())
    if clean == text and len(clean) <= 63:
        return clean
    return f"{clean[:46]}-{hashlib.sha1(text.encode()).hexdigest()[:16]}"


def instance_name(intent_id: str, index: int) -> str:
    """A valid instance name (RFC 1035, <= 63) that is the same for every retry of an intent."""
    return f"sp-{hashlib.sha1(intent_id.encode()).hexdigest()[:20]}-{index}"


def request_id(intent_id: str, what: str) -> str:
    """The ``requestId`` GCE uses to dedupe a retried insert/delete: a UUID stable per intent."""
    return str(uuid.uuid5(NAMESPACE, f"{what}:{intent_id}"))


def _parse_time(stamp: str) -> float | None:
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def _http_reason(exc: Exception) -> str:
    errors = getattr(exc, "errors", None) or []
    for err in errors:
        if isinstance(err, dict) and err.get("reason"):
            return str(err["reason"])
    return str(getattr(exc, "reason", "") or "")


def _retryable(exc: Exception) -> bool:
    from google.api_core import exceptions as gexc

    if isinstance(exc, gexc.TooManyRequests | gexc.InternalServerError | gexc.BadGateway
                  | gexc.ServiceUnavailable | gexc.GatewayTimeout):
        return _http_reason(exc) not in CAPACITY_CODES
    if isinstance(exc, gexc.Forbidden):
        return _http_reason(exc) in RATE_REASONS
    import requests

    return isinstance(exc, requests.ConnectionError | requests.Timeout)


@dataclass(frozen=True)
class GcpLaunchTemplate:
    """What every VM shares besides machine type, zone and market."""

    source_image: str = "projects/deeplearning-platform-release/global/images/family/common-cu124"
    disk_size_gb: int = 100
    network: str = "global/networks/default"
    service_account: str = ""
    startup_script: str = ""
    termination_action: str = "DELETE"  # or STOP


@dataclass(frozen=True)
class GcpOptions:
    """What ``--fleet gcp`` takes; unset zones and machine types come from the settings
    (``SPOTPLANE_GCP_*``), credentials and project from Application Default Credentials
    (``credentials="anonymous"`` for a local fake). The launch template's fields
    (:class:`GcpLaunchTemplate`) are options too; None keeps the template's default."""

    project: str | None = None
    zones: Sequence[str] = ()
    machine_types: Sequence[str] = ()
    credentials: Any = None
    api_endpoint: str | None = None
    clock: Clock | None = None
    cluster: str = "spotplane"
    capacity_probe: Any = None
    prices: Mapping[str, Any] | None = None
    seed: int | None = None
    source_image: str | None = None
    disk_size_gb: int | None = None
    network: str | None = None
    service_account: str | None = None
    startup_script: str | None = None
    termination_action: str | None = None
    cluster_joins: JoinSource | None = None  # region -> its workload cluster (or a callable read per launch)
    api_url: str | None = None  # where the nodes' watcher reports
    node_report_secret: str | None = None  # controlplane.core.nodecreds.report_secret
    boot_hook: str | None = None  # the operator's shell lines (mounts, drivers) in the bootstrap

    def boot(self) -> BootConfig | None:
        """The bootstrap settings when ``cluster_joins`` is given (None: no bootstrap)."""
        return boot_config(self.cluster_joins, self.api_url, self.node_report_secret,
                           self.boot_hook, ("startup_script", self.startup_script))

    def template(self) -> GcpLaunchTemplate:
        """The launch template: the fields given, the template's defaults for the rest."""
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(GcpLaunchTemplate)}
        return GcpLaunchTemplate(**{k: v for k, v in given.items() if v is not None})


@fleet_provider(CLOUD, capabilities=frozenset({Capability.NOTICES}),
                notice_watcher=GcpPreemptionWatcher, list_prices=list_prices,
                spot_lifetimes=spot_lifetimes)
class GcpFleet(FleetProvider):
    """FleetProvider over some zones of one GCP project."""

    name = CLOUD

    def __init__(
        self,
        instances: Any,
        operations: Any,
        machine_types: Any,
        *,
        project: str,
        zones: Sequence[str],
        machine_types_wanted: Sequence[str],
        clock: Clock | None = None,
        cluster: str = "spotplane",
        template: GcpLaunchTemplate | None = None,
        capacity_probe: CapacityProbe | None = None,
        prices: dict[str, tuple[float, float]] | None = None,
        backoff: Backoff | None = None,
        wait_rounds: int = 30,
        boot: BootConfig | None = None,
    ) -> None:
        if not zones:
            raise InvalidInput("zones", "no zone given", fix="pass zones=['us-central1-a', ...]")
        if not machine_types_wanted:
            raise InvalidInput("machine_types", "no machine type given", fix="pass machine_types=['g2-standard-4']")
        self.instances = instances
        self.operations = operations
        self.machine_types = machine_types
        self.project = project
        self.zones = list(zones)
        self.machine_types_wanted = list(machine_types_wanted)
        self.clock: Clock = clock or WallClock()
        self.cluster = cluster
        self.template = template or GcpLaunchTemplate()
        self.capacity_probe = capacity_probe
        self.prices = {**PRICES, **(prices or {})}
        self.backoff = backoff or Backoff(self.clock)
        self.wait_rounds = wait_rounds
        self.boot = boot  # every launch's startup-script is its rendered bootstrap
        if boot is not None and boot.fixed:  # a source read per launch is checked at launch
            for zone in self.zones:
                boot.join_for(zone_region(zone))
        self.page_size = 500  # instances.list page (max 500)
        self._gpu: dict[tuple[str, str], tuple[str, int] | None] = {}
        self._launched_at: dict[str, float] = {}
        self._states = StateDiffer()
        self._zone_of: dict[str, str] = {}
        self._preempted: dict[str, str] = {}  # instance name -> operation id
        self._seen_ops: set[str] = set()
        self._last_raw: dict[str, Any] = {}  # VMs deleted by GCE stay visible (as gone) in describe
        self._gone_at: dict[str, float] = {}
        self._pending_notices: list[FleetEvent] = []
        self._scan_fresh = False  # describe() just read the preemption ops; the next poll reuses them

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_options(cls, **options: Any) -> GcpFleet:
        """Build from :class:`GcpOptions` (credentials and project from Application Default
        Credentials: ``GOOGLE_APPLICATION_CREDENTIALS``, ``GOOGLE_CLOUD_PROJECT``)."""
        opts = typed_options(GcpOptions, CLOUD, options)
        from google.cloud import compute_v1

        credentials = opts.credentials
        project = opts.project
        if credentials == "anonymous":
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()
        elif credentials is None:
            import google.auth
            from google.auth.exceptions import DefaultCredentialsError

            try:
                credentials, default_project = google.auth.default(
                    scopes=["https://www.googleapis.com/auth/compute"])
            except DefaultCredentialsError as exc:
                raise CredentialsError(
                    "gcp: no credentials found",
                    fix="run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS",
                ) from exc
            project = project or default_project
        if not project:
            raise CredentialsError("gcp: no project configured",
                                   fix="pass --project or set GOOGLE_CLOUD_PROJECT")
        client_options = {"api_endpoint": opts.api_endpoint} if opts.api_endpoint else None
        kwargs: dict[str, Any] = {"credentials": credentials, "transport": "rest",
                                  "client_options": client_options}
        clock = opts.clock or WallClock()
        env = load_settings()
        return cls(
            compute_v1.InstancesClient(**kwargs), compute_v1.ZoneOperationsClient(**kwargs),
            compute_v1.MachineTypesClient(**kwargs), project=project,
            zones=list(opts.zones) or comma_list(env.gcp_zones)
            or ["us-central1-a", "us-central1-b", "us-central1-c"],
            machine_types_wanted=list(opts.machine_types) or comma_list(env.gcp_machine_types)
            or ["g2-standard-4"],
            clock=clock, cluster=opts.cluster, template=opts.template(),
            capacity_probe=opts.capacity_probe,
            prices=dict(opts.prices) if opts.prices is not None else None,
            backoff=Backoff(clock, rng=random.Random(opts.seed)),
            boot=opts.boot(),
        )

    # ---------------------------------------------------------------- calls
    def _call(self, what: str, fn: Callable[..., Any], request: dict[str, Any],
              zone: str = "?", machine_type: str = "?") -> Any:
        try:
            return self.backoff.call(lambda: fn(request=request, retry=None), _retryable, what)
        except Exception as exc:
            raise self._translate(exc, what, zone, machine_type) from exc

    def _translate(self, exc: Exception, what: str, zone: str, machine_type: str) -> Exception:
        from google.api_core import exceptions as gexc
        from google.auth.exceptions import DefaultCredentialsError, RefreshError

        if isinstance(exc, DefaultCredentialsError | RefreshError):
            return CredentialsError(f"gcp: {what} rejected the credentials ({exc})",
                                    fix="check GOOGLE_APPLICATION_CREDENTIALS / `gcloud auth application-default login`")
        reason = _http_reason(exc)
        if reason in CAPACITY_CODES:
            return CapacityUnavailable(zone, machine_type, reason)
        if isinstance(exc, gexc.Unauthorized):
            return CredentialsError(f"gcp: {what} rejected the credentials (401)",
                                    fix="check GOOGLE_APPLICATION_CREDENTIALS / `gcloud auth application-default login`")
        if isinstance(exc, gexc.Forbidden):
            return CredentialsError(f"gcp: {what} is not allowed for this identity ({reason or 'forbidden'})",
                                    fix=f"grant roles/compute.instanceAdmin.v1 on project {self.project}")
        return CloudError(f"gcp: {what} failed: {exc}")

    # ---------------------------------------------------------------- catalog
    def _accelerator(self, zone: str, machine_type: str) -> tuple[str, int] | None:
        """(accelerator, count) of a machine type in a zone; None when the zone does not offer it."""
        from google.api_core import exceptions as gexc

        key = (zone, machine_type)
        if key not in self._gpu:
            try:
                mt = self.backoff.call(
                    lambda: self.machine_types.get(request={
                        "project": self.project, "zone": zone, "machine_type": machine_type}, retry=None),
                    _retryable, "machineTypes.get")
            except gexc.NotFound:
                self._gpu[key] = None
                return None
            except Exception as exc:
                raise self._translate(exc, "machineTypes.get", zone, machine_type) from exc
            if mt.accelerators:
                acc = mt.accelerators[0]
                self._gpu[key] = (gpu_name(acc.guest_accelerator_type), int(acc.guest_accelerator_count))
            else:
                attached = ATTACHED_GPUS.get(machine_type)
                self._gpu[key] = (gpu_name(attached[0]), attached[1]) if attached else ("", 0)
        return self._gpu[key]

    def offers(self) -> list[Offer]:
        out = []
        for zone in self.zones:
            if self.boot is not None and not self.boot.joinable(zone_region(zone)):
                continue  # no workload cluster to join in its region (yet): nothing to place on
            for mt in self.machine_types_wanted:
                acc = self._accelerator(zone, mt)
                if acc is None:
                    continue
                spot, standard = self.prices.get(mt, (float("nan"), float("nan")))
                out.append(Offer(CLOUD, zone, mt, acc[0], acc[1], spot, standard, zone_region(zone)))
        return out

    def spot_available(self, zone: str, instance_type: str) -> bool:
        if self._accelerator(zone, instance_type) is None:
            return False
        return self.capacity_probe(zone, instance_type) if self.capacity_probe else True

    # ---------------------------------------------------------------- launch / terminate
    def _intent_filter(self, intent_id: str) -> str:
        return (f'(labels.spotplane-cluster = "{label_value(self.cluster)}") AND '
                f'(labels.spotplane-intent = "{label_value(intent_id)}")')

    def _list(self, zone: str, filter_: str) -> list[Any]:
        out: list[Any] = []
        token = ""
        while True:
            req: dict[str, Any] = {"project": self.project, "zone": zone, "filter": filter_,
                                   "max_results": self.page_size}
            if token:
                req["page_token"] = token
            page = self._call("instances.list", self.instances.list, req, zone)
            out.extend(page.items)
            token = page.next_page_token
            if not token:
                return out

    def launch(self, request: LaunchRequest) -> list[Instance]:
        if request.count < 1:
            raise InvalidInput("count", f"must be >= 1, got {request.count}", fix="launch at least one")
        existing = {i.name: i for i in self._list(request.zone, self._intent_filter(request.intent_id))}
        for index in range(request.count):
            name = instance_name(request.intent_id, index)
            if name in existing:
                continue
            self._insert(request, name, index)
            self._launched_at[name] = self.clock.now()
            existing[name] = self._get(request.zone, name)
        return [self._instance(existing[n]) for n in sorted(existing)]

    def _insert(self, request: LaunchRequest, name: str, index: int) -> None:
        from google.api_core import exceptions as gexc

        body = self._body(request, name)
        try:
            op = self.backoff.call(
                lambda: self.instances.insert_unary(request={
                    "project": self.project, "zone": request.zone, "instance_resource": body,
                    "request_id": request_id(request.intent_id, f"insert-{index}")}, retry=None),
                _retryable, "instances.insert")
        except gexc.Conflict:  # already exists: an earlier try made it
            return
        except Exception as exc:
            raise self._translate(exc, "instances.insert", request.zone, request.instance_type) from exc
        self._wait(op, request.zone, request.instance_type)

    def _wait(self, op: Any, zone: str, machine_type: str) -> None:
        """Wait until the insert operation is DONE; its error codes decide what is raised."""
        from google.cloud import compute_v1

        for _ in range(self.wait_rounds):
            if op.status == compute_v1.Operation.Status.DONE:
                break
            op = self._call("zoneOperations.wait", self.operations.wait,
                            {"project": self.project, "zone": zone, "operation": op.name}, zone, machine_type)
        else:
            raise CloudError(f"gcp: insert {op.name} in {zone} not done after {self.wait_rounds} waits")
        errors = list(op.error.errors) if op.error else []
        if not errors:
            return
        codes = [e.code for e in errors]
        capacity = next((c for c in codes if c in CAPACITY_CODES or "STOCKOUT" in c), None)
        if capacity:
            raise CapacityUnavailable(zone, machine_type, capacity)
        raise CloudError(f"gcp: insert in {zone} failed: " + "; ".join(f"{e.code}: {e.message}" for e in errors))

    def _startup_script(self, request: LaunchRequest) -> str:
        """The rendered bootstrap when the fleet has one, else the template's own script."""
        if self.boot is None:
            return self.template.startup_script
        gpu, count = self._accelerator(request.zone, request.instance_type) or ("", 0)
        return self.boot.render(NodeLaunch(CLOUD, request.intent_id, request.instance_type, gpu,
                                           count, request.market), zone_region(request.zone))

    def _body(self, request: LaunchRequest, name: str) -> Any:
        from google.cloud import compute_v1

        t = self.template
        zone = request.zone
        labels = {"spotplane-cluster": label_value(self.cluster),
                  "spotplane-intent": label_value(request.intent_id)}
        labels.update({f"spotplane-{label_value(k)}"[:63]: label_value(str(v)) for k, v in request.tags.items()})
        scheduling = compute_v1.Scheduling(on_host_maintenance="TERMINATE", automatic_restart=False)
        if request.market == Market.SPOT:
            scheduling.provisioning_model = "SPOT"
            scheduling.instance_termination_action = t.termination_action
        else:
            scheduling.provisioning_model = "STANDARD"
        items = [compute_v1.Items(key="spotplane-intent", value=request.intent_id)]
        items += [compute_v1.Items(key=f"spotplane-{k}", value=str(v)) for k, v in request.tags.items()]
        script = self._startup_script(request)
        if script:
            items.append(compute_v1.Items(key="startup-script", value=script))
        body = compute_v1.Instance(
            name=name, machine_type=f"zones/{zone}/machineTypes/{request.instance_type}",
            labels=labels, scheduling=scheduling, metadata=compute_v1.Metadata(items=items),
            disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
                source_image=t.source_image, disk_size_gb=t.disk_size_gb))],
            network_interfaces=[compute_v1.NetworkInterface(network=t.network)],
        )
        attached = ATTACHED_GPUS.get(request.instance_type)
        if attached:
            body.guest_accelerators = [compute_v1.AcceleratorConfig(
                accelerator_type=f"zones/{zone}/acceleratorTypes/{attached[0]}", accelerator_count=attached[1])]
        if t.service_account:
            body.service_accounts = [compute_v1.ServiceAccount(
                email=t.service_account, scopes=["https://www.googleapis.com/auth/cloud-platform"])]
        return body

    def _get(self, zone: str, name: str) -> Any:
        return self._call("instances.get", self.instances.get,
                          {"project": self.project, "zone": zone, "instance": name}, zone)

    def terminate(self, instance_ids: Sequence[str]) -> None:
        from google.api_core import exceptions as gexc

        for iid in instance_ids:
            zone = self._zone_of.get(iid) or self._find_zone(iid)
            if zone is None:
                continue
            self._states.ended_by_us([iid])
            req = {"project": self.project, "zone": zone, "instance": iid,
                   "request_id": request_id(iid, "delete")}
            try:
                self.backoff.call(lambda r=req: self.instances.delete_unary(request=r, retry=None),  # type: ignore[misc]
                                  _retryable, "instances.delete")
            except gexc.NotFound:
                continue
            except Exception as exc:
                raise self._translate(exc, "instances.delete", zone, "?") from exc

    def _find_zone(self, name: str) -> str | None:
        for zone in self.zones:
            if self._list(zone, f'name = "{name}"'):
                self._zone_of[name] = zone
                return zone
        return None

    def private_address(self, instance_id: str) -> str | None:
        """The VM's internal IPv4 address (its first network interface's; None while it has none)."""
        zone = self._zone_of.get(instance_id) or self._find_zone(instance_id)
        if zone is None:
            return None
        found = self._list(zone, f'name = "{instance_id}"')
        nics = list(found[0].network_interfaces) if found else []
        return str(nics[0].network_i_p) or None if nics else None

    def console_tail(self, instance_id: str, lines: int = 20) -> str:
        """The last ``lines`` of the VM's serial console (its startup-script's log)."""
        zone = self._zone_of.get(instance_id) or self._find_zone(instance_id)
        if zone is None:
            return ""
        out = self._call("instances.getSerialPortOutput", self.instances.get_serial_port_output,
                         {"project": self.project, "zone": zone, "instance": instance_id, "port": 1},
                         zone)
        return "\n".join(str(out.contents or "").splitlines()[-lines:])

    # ---------------------------------------------------------------- views and events
    def _all(self) -> list[Any]:
        out = []
        for zone in self.zones:
            out.extend(self._list(zone, f'labels.spotplane-cluster = "{label_value(self.cluster)}"'))
        now = self.clock.now()
        listed = {r.name for r in out}
        for raw in out:
            self._last_raw[raw.name] = raw
        for name in set(self._last_raw) - listed:
            self._gone_at.setdefault(name, now)
            if now - self._gone_at[name] > GONE_MEMORY_S:
                del self._last_raw[name], self._gone_at[name]
        return out

    def _gone(self) -> list[Instance]:
        """VMs that vanished (deleted by us, or by a DELETE-action preemption), as their last view."""
        out = []
        for name in self._gone_at:
            if name in self._last_raw:
                state = InstanceState.PREEMPTED if name in self._preempted else InstanceState.TERMINATED
                out.append(replace(self._instance(self._last_raw[name]), state=state))
        return out

    def describe(self, instance_ids: Sequence[str] | None = None) -> list[Instance]:
        raws = self._all()
        if instance_ids is None:  # the controller's snapshot: show notices already (NOTICED)
            self._scan_preemptions({r.name: r for r in raws})
            self._scan_fresh = True
        out = [self._instance(r) for r in raws] + self._gone()
        if instance_ids is not None:
            wanted = set(instance_ids)
            out = [i for i in out if i.instance_id in wanted]
        return out

    def _state(self, raw: Any) -> InstanceState:
        status = raw.status
        if raw.name in self._preempted:
            return InstanceState.PREEMPTED if status in ("STOPPING", "TERMINATED", "SUSPENDED") else InstanceState.NOTICED
        if status in ("PROVISIONING", "STAGING", "REPAIRING"):
            return InstanceState.PENDING
        if status == "RUNNING":
            return InstanceState.RUNNING
        return InstanceState.TERMINATED

    def _instance(self, raw: Any) -> Instance:
        zone = url_name(raw.zone)
        self._zone_of[raw.name] = zone
        mt = url_name(raw.machine_type)
        spot = raw.scheduling.provisioning_model == "SPOT" or raw.scheduling.preemptible
        acc = ("", 0)
        if raw.guest_accelerators:
            acc = (gpu_name(raw.guest_accelerators[0].accelerator_type),
                   int(raw.guest_accelerators[0].accelerator_count))
        else:
            acc = self._accelerator(zone, mt) or ("", 0)
        price = self.prices.get(mt, (float("nan"), float("nan")))[0 if spot else 1]
        meta = {i.key: i.value for i in raw.metadata.items} if raw.metadata else {}
        launched = self._launched_at.get(raw.name) or _parse_time(raw.creation_timestamp) or self.clock.now()
        return Instance(
            instance_id=raw.name, cloud=CLOUD, zone=zone, instance_type=mt,
            market=Market.SPOT if spot else Market.ON_DEMAND, state=self._state(raw),
            launched_at=launched, price_per_hour=price, accelerator=acc[0], accelerator_count=acc[1],
            intent_id=meta.get("spotplane-intent", ""),
            tags={k.removeprefix("spotplane-"): v for k, v in meta.items()
                  if k.startswith("spotplane-") and k != "spotplane-intent"},
        )

    def _preemption_ops(self, zone: str) -> list[Any]:
        # first page only (the pager would fetch more pages outside the retry loop): the newest 500
        page = self._call("zoneOperations.list", self.operations.list,
                          {"project": self.project, "zone": zone, "max_results": 500,
                           "order_by": "creationTimestamp desc",
                           "filter": f'operationType = "{PREEMPTED_OP}"'}, zone)
        return list(page.items)

    def _scan_preemptions(self, ours: dict[str, Any]) -> None:
        """Read the zones' preempted operations; a notice for each of our VMs still RUNNING."""
        now = self.clock.now()
        known = set(ours) | self._states.known()
        for zone in self.zones:
            for op in self._preemption_ops(zone):
                name = url_name(op.target_link)
                if op.id in self._seen_ops or name not in known:
                    continue
                self._seen_ops.add(op.id)
                self._preempted[name] = str(op.id)
                raw = ours.get(name)
                if raw is not None and raw.status == "RUNNING":
                    self._pending_notices.append(FleetEvent(
                        EventKind.PREEMPTION_NOTICE, name, zone, now,
                        seconds_left=NOTICE_SECONDS, detail=PREEMPTED_OP))

    def poll_events(self) -> list[FleetEvent]:
        now = self.clock.now()
        ours = {r.name: r for r in self._all()}
        if not self._scan_fresh:
            self._scan_preemptions(ours)
        self._scan_fresh = False
        events, self._pending_notices = self._pending_notices, []
        for name, raw in ours.items():
            events.extend(self._transition(name, url_name(raw.zone), self._state(raw), raw.status, now))
        for name in self._states.known() - set(ours):  # deleted (by us, or by a DELETE preemption)
            state = InstanceState.PREEMPTED if name in self._preempted else InstanceState.TERMINATED
            events.extend(self._transition(name, self._zone_of.get(name, ""), state, "DELETED", now))
        return events

    def _transition(self, name: str, zone: str, state: InstanceState, status: str, now: float) -> list[FleetEvent]:
        detail = PREEMPTED_OP if state == InstanceState.PREEMPTED else status
        return self._states.events(name, zone, state, now, detail=detail)


def zone_region(zone: str) -> str:
    """``us-central1-a`` -> ``us-central1``."""
    return zone.rsplit("-", 1)[0]
