"""AWS EC2 fleet provider (boto3): spot and on-demand GPU instances behind the FleetProvider interface.

Calls made (and nothing else): ``run_instances``, ``describe_instances``, ``terminate_instances``,
``describe_spot_instance_requests``, ``describe_instance_type_offerings``,
``describe_instance_types``, ``describe_spot_price_history`` and, for the
``capacity-reservation`` probe only, ``create_capacity_reservation`` /
``cancel_capacity_reservation``.

- Spot launches are one-time requests that terminate on interruption
  (``InstanceMarketOptions``); every launch carries a ``ClientToken`` derived from the intent
  id, and the provider first looks for instances already tagged with that intent, so a retried
  launch never makes a second instance.
- Every instance is tagged ``spotplane:cluster``, ``spotplane:intent`` and one
  ``spotplane:<key>`` tag per request tag (node id, job, tenant).
- Events come from polling: instance state changes (a terminated spot instance whose
  ``StateReason`` is ``Server.SpotInstanceTermination`` was preempted) and the spot request
  status (``marked-for-termination`` is the two-minute notice).
- ``InsufficientInstanceCapacity`` / ``MaxSpotInstanceCountExceeded`` / ``SpotMaxPriceTooLow``
  raise :class:`CapacityUnavailable` (try the next zone); ``RequestLimitExceeded`` and 5xx are
  retried with jittered backoff on the control-plane clock (botocore's own retries are off).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import logging
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clusters.aws.catalog import ON_DEMAND_USD_PER_HOUR, list_prices
from clusters.aws.notices import NOTICE_SECONDS, AwsSpotNoticeWatcher
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
from clusters.providers import Capability, fleet_provider
from clusters.statediff import StateDiffer
from controlplane.core.clock import Clock, WallClock
from controlplane.core.config import comma_list, load_settings
from controlplane.core.errors import CapacityUnavailable, CloudError, CredentialsError, InvalidInput
from controlplane.core.models import Market

log = logging.getLogger(__name__)

CLOUD = "aws"
CAPACITY_CODES = frozenset({
    "InsufficientInstanceCapacity",
    "MaxSpotInstanceCountExceeded",
    "SpotMaxPriceTooLow",
    "InsufficientCapacity",
    "InsufficientHostCapacity",
})
RETRY_CODES = frozenset({
    "RequestLimitExceeded", "Throttling", "ThrottlingException", "InternalError",
    "InternalFailure", "ServiceUnavailable", "Unavailable",
})
CREDENTIAL_CODES = frozenset({
    "AuthFailure", "InvalidClientTokenId", "SignatureDoesNotMatch", "ExpiredToken",
    "UnrecognizedClientException", "UnauthorizedOperation", "OptInRequired",
})
SPOT_INTERRUPTED = "Server.SpotInstanceTermination"
NOTICE_CODES = frozenset({"marked-for-termination", "marked-for-stop", "marked-for-hibernation"})
PREEMPTED_REQUEST_CODES = frozenset({
    "instance-terminated-by-price", "instance-terminated-no-capacity",
    "instance-terminated-capacity-oversubscribed", "instance-terminated-launch-group-constraint",
})
LINUX = ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"]

CapacityProbe = Callable[[str, str], bool]


def client_token(intent_id: str) -> str:
    """EC2 ``ClientToken`` for an intent: at most 64 ASCII characters, stable across retries."""
    if intent_id.isascii() and len(intent_id) <= 64:
        return intent_id
    return hashlib.sha256(intent_id.encode()).hexdigest()[:64]


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def _retryable(exc: Exception) -> bool:
    from botocore.exceptions import ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

    if isinstance(exc, ConnectionClosedError | EndpointConnectionError | ReadTimeoutError):
        return True
    return _code(exc) in RETRY_CODES


@dataclass(frozen=True)
class AwsLaunchTemplate:
    """What every launched instance shares besides type, zone and market."""

    image_id: str = "ami-0123456789abcdef0"
    key_name: str = ""
    security_group_ids: tuple[str, ...] = ()
    subnet_by_zone: tuple[tuple[str, str], ...] = ()
    iam_instance_profile: str = ""
    user_data: str = ""
    spot_max_price: str = ""  # empty: capped at the on-demand price (AWS default)


@dataclass(frozen=True)
class AwsOptions:
    """What ``--fleet aws`` takes; unset zones, instance types and image come from the settings
    (``SPOTPLANE_AWS_*``), region and credentials from boto3's usual chain. The launch template's
    fields (:class:`AwsLaunchTemplate`) are options too; None keeps the template's default."""

    region: str | None = None
    zones: Sequence[str] = ()
    instance_types: Sequence[str] = ()
    profile: str | None = None
    endpoint_url: str | None = None
    clock: Clock | None = None
    cluster: str = "spotplane"
    capacity_probe: str = "offerings"
    on_demand_prices: Mapping[str, float] | None = None
    seed: int | None = None
    image_id: str | None = None
    key_name: str | None = None
    security_group_ids: tuple[str, ...] | None = None
    subnet_by_zone: tuple[tuple[str, str], ...] | None = None
    iam_instance_profile: str | None = None
    user_data: str | None = None
    spot_max_price: str | None = None
    cluster_joins: JoinSource | None = None  # region -> its workload cluster (or a callable read per launch)
    api_url: str | None = None  # where the nodes' watcher reports
    node_report_secret: str | None = None  # controlplane.core.nodecreds.report_secret
    boot_hook: str | None = None  # the operator's shell lines (mounts, drivers) in the bootstrap

    def boot(self) -> BootConfig | None:
        """The bootstrap settings when ``cluster_joins`` is given (None: no bootstrap)."""
        return boot_config(self.cluster_joins, self.api_url, self.node_report_secret,
                           self.boot_hook, ("user_data", self.user_data))

    def template(self, default_image: str | None) -> AwsLaunchTemplate:
        """The launch template: the fields given, the settings' image, the template's defaults."""
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(AwsLaunchTemplate)}
        if given["image_id"] is None:
            given["image_id"] = default_image
        return AwsLaunchTemplate(**{k: v for k, v in given.items() if v is not None})


@fleet_provider(CLOUD, capabilities=frozenset({Capability.NOTICES}),
                notice_watcher=AwsSpotNoticeWatcher, list_prices=list_prices)
class AwsFleet(FleetProvider):
    """FleetProvider over one EC2 region."""

    name = CLOUD

    def __init__(
        self,
        ec2: Any,
        *,
        region: str,
        zones: Sequence[str],
        instance_types: Sequence[str],
        clock: Clock | None = None,
        cluster: str = "spotplane",
        template: AwsLaunchTemplate | None = None,
        capacity_probe: str | CapacityProbe = "offerings",
        on_demand_prices: dict[str, float] | None = None,
        backoff: Backoff | None = None,
        catalog_ttl_s: float = 300.0,
        boot: BootConfig | None = None,
    ) -> None:
        if not zones:
            raise InvalidInput("zones", "no availability zone given", fix="pass zones=['us-east-1a', ...]")
        if not instance_types:
            raise InvalidInput("instance_types", "no instance type given", fix="pass instance_types=['g5.xlarge']")
        if isinstance(capacity_probe, str) and capacity_probe not in ("offerings", "capacity-reservation"):
            raise InvalidInput("capacity_probe", f"unknown probe {capacity_probe!r}",
                               fix="use 'offerings', 'capacity-reservation' or a callable(zone, type)")
        self.ec2 = ec2
        self.region = region
        self.zones = list(zones)
        self.instance_types = list(instance_types)
        self.clock: Clock = clock or WallClock()
        self.cluster = cluster
        self.template = template or AwsLaunchTemplate()
        self.capacity_probe = capacity_probe
        self.on_demand_prices = {**ON_DEMAND_USD_PER_HOUR, **(on_demand_prices or {})}
        self.backoff = backoff or Backoff(self.clock)
        self.catalog_ttl_s = catalog_ttl_s  # offerings and spot prices are re-read this often
        self.boot = boot  # every launch's user_data is its rendered bootstrap
        if boot is not None and boot.fixed:  # a source read per launch is checked at launch
            boot.join_for(region)
        self.page_size = 1000  # describe_instances page (5..1000)
        self._catalog: dict[str, tuple[float, Any]] = {}
        self._gpu: dict[str, tuple[str, int]] = {}
        self._spot_price: dict[tuple[str, str], float] = {}
        self._launched_at: dict[str, float] = {}
        self._states = StateDiffer()
        self._noticed: set[str] = set()
        self._pending_notices: list[FleetEvent] = []
        self._notices_fresh = False  # describe() just read the notices; the next poll reuses them

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_options(cls, **options: Any) -> AwsFleet:
        """Build from :class:`AwsOptions` (region and credentials from boto3's usual chain:
        ``AWS_REGION``, ``AWS_PROFILE``, an instance role...)."""
        opts = typed_options(AwsOptions, CLOUD, options)
        import boto3
        from botocore.config import Config
        from botocore.exceptions import ProfileNotFound

        try:
            session = boto3.Session(profile_name=opts.profile, region_name=opts.region)
        except ProfileNotFound as exc:
            raise CredentialsError(f"aws: {exc}", fix="set AWS_PROFILE to a profile in ~/.aws/config") from exc
        region = session.region_name
        if not region:
            raise CredentialsError("aws: no region configured",
                                   fix="pass --region or set AWS_REGION / AWS_DEFAULT_REGION")
        if session.get_credentials() is None:
            raise CredentialsError(
                "aws: no credentials found",
                fix="set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or run with an instance role",
            )
        env = load_settings()
        config = Config(retries={"total_max_attempts": 1}, connect_timeout=10, read_timeout=30)
        ec2 = session.client("ec2", endpoint_url=opts.endpoint_url, config=config)
        zones = list(opts.zones) or comma_list(env.aws_zones) or [f"{region}{s}" for s in "abc"]
        return cls(
            ec2, region=region, zones=zones,
            instance_types=list(opts.instance_types) or comma_list(env.aws_instance_types) or ["g5.xlarge"],
            clock=opts.clock, cluster=opts.cluster, template=opts.template(env.aws_image_id),
            capacity_probe=opts.capacity_probe,
            on_demand_prices=dict(opts.on_demand_prices) if opts.on_demand_prices is not None else None,
            backoff=Backoff(opts.clock or WallClock(), rng=random.Random(opts.seed)),
            boot=opts.boot(),
        )

    # ---------------------------------------------------------------- calls
    def _call(self, op: str, **params: Any) -> Any:
        """One EC2 call with retries on throttling and a clear error otherwise."""
        try:
            return self.backoff.call(lambda: getattr(self.ec2, op)(**params), _retryable, f"ec2.{op}")
        except Exception as exc:
            raise self._translate(exc, op, params) from exc

    def _translate(self, exc: Exception, op: str, params: dict[str, Any]) -> Exception:
        from botocore.exceptions import NoCredentialsError, NoRegionError, PartialCredentialsError

        if isinstance(exc, NoCredentialsError | PartialCredentialsError):
            return CredentialsError(f"aws: {exc}", fix="set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE")
        if isinstance(exc, NoRegionError):
            return CredentialsError("aws: no region configured", fix="set AWS_REGION")
        code = _code(exc)
        if code in CAPACITY_CODES:
            zone = params.get("Placement", {}).get("AvailabilityZone", params.get("AvailabilityZone", "?"))
            return CapacityUnavailable(zone, str(params.get("InstanceType", "?")), code)
        if code in CREDENTIAL_CODES:
            fix = (f"grant ec2:{op_name(op)} to this identity" if code == "UnauthorizedOperation"
                   else "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or the profile) and the clock")
            return CredentialsError(f"aws: {op} rejected the credentials ({code})", fix=fix)
        return CloudError(f"aws: {op} failed: {exc}")

    def _describe_raw(self, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            params: dict[str, Any] = {"Filters": filters, "MaxResults": self.page_size}
            if token:
                params["NextToken"] = token
            page = self._call("describe_instances", **params)
            out.extend(i for r in page.get("Reservations", []) for i in r.get("Instances", []))
            token = page.get("NextToken")
            if not token:
                return out

    # ---------------------------------------------------------------- catalog
    def _gpu_of(self, instance_type: str) -> tuple[str, int]:
        if instance_type not in self._gpu:
            types = self._call("describe_instance_types", InstanceTypes=[instance_type])["InstanceTypes"]
            gpus = (types[0].get("GpuInfo") or {}).get("Gpus", []) if types else []
            name = gpus[0]["Name"] if gpus else ""
            count = sum(int(g.get("Count", 0)) for g in gpus)
            self._gpu[instance_type] = (name, count)
        return self._gpu[instance_type]

    def _cached(self, key: str, fetch: Callable[[], Any]) -> Any:
        now = self.clock.now()
        hit = self._catalog.get(key)
        if hit is None or now - hit[0] >= self.catalog_ttl_s:
            hit = (now, fetch())
            self._catalog[key] = hit
        return hit[1]

    def _offered(self) -> set[tuple[str, str]]:
        return set(self._cached("offerings", self._fetch_offered))

    def _fetch_offered(self) -> set[tuple[str, str]]:
        page = self._call(
            "describe_instance_type_offerings", LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": self.instance_types},
                     {"Name": "location", "Values": self.zones}],
        )
        return {(o["Location"], o["InstanceType"]) for o in page.get("InstanceTypeOfferings", [])}

    def _latest_spot_prices(self) -> dict[tuple[str, str], float]:
        return dict(self._cached("spot_prices", self._fetch_spot_prices))

    def _fetch_spot_prices(self) -> dict[tuple[str, str], float]:
        page = self._call("describe_spot_price_history", InstanceTypes=self.instance_types,
                          ProductDescriptions=LINUX, MaxResults=1000)
        latest: dict[tuple[str, str], tuple[Any, float]] = {}
        for row in page.get("SpotPriceHistory", []):
            key = (row["AvailabilityZone"], row["InstanceType"])
            if key not in latest or row["Timestamp"] > latest[key][0]:
                latest[key] = (row["Timestamp"], float(row["SpotPrice"]))
        self._spot_price.update({k: v for k, (_, v) in latest.items()})
        return {k: v for k, (_, v) in latest.items()}

    def offers(self) -> list[Offer]:
        if self.boot is not None and not self.boot.joinable(self.region):
            return []  # no workload cluster to join here (yet): nothing to place on
        prices = self._latest_spot_prices()
        out = []
        for zone, itype in sorted(self._offered()):
            gpu, count = self._gpu_of(itype)
            on_demand = self.on_demand_prices.get(itype, float("nan"))
            out.append(Offer(CLOUD, zone, itype, gpu, count, prices.get((zone, itype), on_demand),
                             on_demand, self.region))
        return out

    def spot_available(self, zone: str, instance_type: str) -> bool:
        if callable(self.capacity_probe):
            return bool(self.capacity_probe(zone, instance_type))
        if self.capacity_probe == "capacity-reservation":
            return self._probe_by_reservation(zone, instance_type)
        return (zone, instance_type) in self._offered() and (zone, instance_type) in self._latest_spot_prices()

    def _probe_by_reservation(self, zone: str, instance_type: str) -> bool:
        """Can't Be Late's probe: reserve one instance of capacity, then cancel at once."""
        try:
            made = self._call("create_capacity_reservation", InstanceType=instance_type,
                              InstancePlatform="Linux/UNIX", AvailabilityZone=zone,
                              InstanceCount=1, EndDateType="unlimited",
                              InstanceMatchCriteria="targeted")
        except CapacityUnavailable:
            return False
        reservation_id = made["CapacityReservation"]["CapacityReservationId"]
        self._call("cancel_capacity_reservation", CapacityReservationId=reservation_id)
        return True

    # ---------------------------------------------------------------- launch / terminate
    def launch(self, request: LaunchRequest) -> list[Instance]:
        if request.count < 1:
            raise InvalidInput("count", f"must be >= 1, got {request.count}", fix="launch at least one")
        existing = self._describe_raw([{"Name": "tag:spotplane:intent", "Values": [request.intent_id]},
                                       {"Name": "tag:spotplane:cluster", "Values": [self.cluster]}])
        if existing:
            log.info("intent %s already launched %d instance(s); not launching again",
                     request.intent_id, len(existing))
            return [self._instance(raw) for raw in existing]
        reply = self._call("run_instances", **self._run_params(request))
        now = self.clock.now()
        instances = []
        for raw in reply.get("Instances", []):
            self._launched_at[raw["InstanceId"]] = now
            instances.append(self._instance(raw))
        return instances

    def _run_params(self, request: LaunchRequest) -> dict[str, Any]:
        tags = {"spotplane:cluster": self.cluster, "spotplane:intent": request.intent_id,
                "Name": f"spotplane-{request.tags.get('node_id', request.intent_id)}"[:255]}
        tags.update({f"spotplane:{k}": str(v) for k, v in request.tags.items()})
        params: dict[str, Any] = {
            "ImageId": self.template.image_id, "InstanceType": request.instance_type,
            "MinCount": request.count, "MaxCount": request.count,
            "ClientToken": client_token(request.intent_id),
            "Placement": {"AvailabilityZone": request.zone},
            "TagSpecifications": [{"ResourceType": "instance",
                                   "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
        }
        if request.market == Market.SPOT:
            spot: dict[str, Any] = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
            if self.template.spot_max_price:
                spot["MaxPrice"] = self.template.spot_max_price
            params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
        subnet = dict(self.template.subnet_by_zone).get(request.zone)
        if subnet:
            params["SubnetId"] = subnet
        if self.template.key_name:
            params["KeyName"] = self.template.key_name
        if self.template.security_group_ids:
            params["SecurityGroupIds"] = list(self.template.security_group_ids)
        if self.template.iam_instance_profile:
            params["IamInstanceProfile"] = {"Name": self.template.iam_instance_profile}
        if self.boot is not None:
            gpu, count = self._gpu_of(request.instance_type)
            params["UserData"] = self.boot.render(NodeLaunch(
                CLOUD, request.intent_id, request.instance_type, gpu, count, request.market), self.region)
        elif self.template.user_data:
            params["UserData"] = self.template.user_data
        return params

    def terminate(self, instance_ids: Sequence[str]) -> None:
        if not instance_ids:
            return
        live = [i["InstanceId"] for i in self._describe_raw([{"Name": "instance-id", "Values": list(instance_ids)}])
                if i["State"]["Name"] not in ("shutting-down", "terminated")]
        if not live:
            return
        self._states.ended_by_us(live)
        self._call("terminate_instances", InstanceIds=live)

    def private_address(self, instance_id: str) -> str | None:
        """The instance's private IPv4 address (None while it has none)."""
        raws = self._raw([instance_id])
        return raws[0].get("PrivateIpAddress") if raws else None

    def console_tail(self, instance_id: str, lines: int = 20) -> str:
        """The last ``lines`` of the instance's console output (its user_data's log)."""
        out = self._call("get_console_output", InstanceId=instance_id, Latest=True).get("Output") or ""
        with contextlib.suppress(ValueError):  # not base64: already text
            out = base64.b64decode(out, validate=True).decode(errors="replace")
        return "\n".join(out.splitlines()[-lines:])

    # ---------------------------------------------------------------- views and events
    def describe(self, instance_ids: Sequence[str] | None = None) -> list[Instance]:
        raws = self._raw(instance_ids)
        if instance_ids is None:  # the controller's snapshot: show notices already (NOTICED)
            self._pending_notices += self._notices(raws, self.clock.now())
            self._notices_fresh = True
        return [self._instance(raw) for raw in raws]

    def _raw(self, instance_ids: Sequence[str] | None) -> list[dict[str, Any]]:
        if instance_ids is None:
            return self._describe_raw([{"Name": "tag:spotplane:cluster", "Values": [self.cluster]}])
        if not instance_ids:
            return []
        return self._describe_raw([{"Name": "instance-id", "Values": list(instance_ids)}])

    def _state(self, raw: dict[str, Any]) -> InstanceState:
        name = raw["State"]["Name"]
        if name == "pending":
            return InstanceState.PENDING
        if name == "running":
            return InstanceState.NOTICED if raw["InstanceId"] in self._noticed else InstanceState.RUNNING
        reason = (raw.get("StateReason") or {}).get("Code", "")
        if reason == SPOT_INTERRUPTED:
            return InstanceState.PREEMPTED
        return InstanceState.TERMINATED

    def _instance(self, raw: dict[str, Any]) -> Instance:
        tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
        itype = raw["InstanceType"]
        zone = raw.get("Placement", {}).get("AvailabilityZone", "")
        market = Market.SPOT if raw.get("InstanceLifecycle") == "spot" else Market.ON_DEMAND
        gpu, count = self._gpu_of(itype)
        on_demand = self.on_demand_prices.get(itype, float("nan"))
        price = self._spot_price.get((zone, itype), on_demand) if market == Market.SPOT else on_demand
        launched = self._launched_at.get(raw["InstanceId"])
        if launched is None:
            launched = raw["LaunchTime"].timestamp() if raw.get("LaunchTime") else self.clock.now()
        return Instance(
            instance_id=raw["InstanceId"], cloud=CLOUD, zone=zone, instance_type=itype,
            market=market, state=self._state(raw), launched_at=launched, price_per_hour=price,
            accelerator=gpu, accelerator_count=count, intent_id=tags.get("spotplane:intent", ""),
            tags={k.removeprefix("spotplane:"): v for k, v in tags.items()
                  if k.startswith("spotplane:") and k not in ("spotplane:cluster", "spotplane:intent")},
        )

    def poll_events(self) -> list[FleetEvent]:
        now = self.clock.now()
        raws = self._raw(None)
        if not self._notices_fresh:
            self._pending_notices += self._notices(raws, now)
        self._notices_fresh = False
        events, self._pending_notices = self._pending_notices, []
        for raw in raws:
            events.extend(self._transition(raw, now))
        return events

    def _notices(self, raws: Iterable[dict[str, Any]], now: float) -> list[FleetEvent]:
        spot_running = {r["InstanceId"]: r for r in raws
                        if r.get("InstanceLifecycle") == "spot" and r["State"]["Name"] in ("pending", "running")}
        if not spot_running:
            return []
        page = self._call("describe_spot_instance_requests",
                          Filters=[{"Name": "instance-id", "Values": sorted(spot_running)}])
        events = []
        for req in page.get("SpotInstanceRequests", []):
            iid, status = req.get("InstanceId", ""), req.get("Status", {})
            if iid in spot_running and status.get("Code") in NOTICE_CODES and iid not in self._noticed:
                self._noticed.add(iid)
                zone = spot_running[iid].get("Placement", {}).get("AvailabilityZone", "")
                events.append(FleetEvent(EventKind.PREEMPTION_NOTICE, iid, zone, now,
                                         seconds_left=NOTICE_SECONDS, detail=str(status.get("Code"))))
        return events

    def _transition(self, raw: dict[str, Any], now: float) -> list[FleetEvent]:
        reason = (raw.get("StateReason") or {}).get("Code", "")
        return self._states.events(raw["InstanceId"], raw.get("Placement", {}).get("AvailabilityZone", ""),
                                   self._state(raw), now, detail=reason, may_have_failed=bool(reason))


def op_name(op: str) -> str:
    """``run_instances`` -> ``RunInstances`` (the IAM action name)."""
    return "".join(part.capitalize() for part in op.split("_"))
