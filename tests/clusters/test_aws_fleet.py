"""AwsFleet against moto's real HTTP server, with real boto3 going over HTTP through a small proxy.

The proxy forwards every EC2 query-protocol request to moto and can, per action, answer with an
EC2 error document instead (throttling, stockouts, bad credentials), or forward the request and
then lose the answer (a timeout after the instance was made). Moto does not implement
``ClientToken`` idempotency, so the proxy replays a RunInstances answer for a token it has
already seen, exactly as EC2 documents it ("the same response is returned"); the test then
asserts both attempts really carried the same token.
"""

from __future__ import annotations

import http.client
import random
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from botocore.config import Config

from clusters.aws.fleet import AwsFleet, AwsLaunchTemplate, client_token
from clusters.cloudcalls import Backoff, launch_first_available
from clusters.fleet import EventKind, FleetProvider, InstanceState, LaunchRequest
from clusters.providers import make_provider
from controlplane.core.clock import SimClock
from controlplane.core.errors import CapacityUnavailable, CredentialsError
from controlplane.core.models import Market
from tests.support import free_port

REGION = "us-east-1"
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
GPU = "g5.xlarge"


ERROR_XML = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
    "<Message>{message}</Message></Error></Errors><RequestID>{rid}</RequestID></Response>"
)
CREATE_CR_XML = (
    '<CreateCapacityReservationResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
    "<requestId>{rid}</requestId><capacityReservation>"
    "<capacityReservationId>cr-0123456789abcdef0</capacityReservationId>"
    "<instanceType>{itype}</instanceType><availabilityZone>{zone}</availabilityZone>"
    "<totalInstanceCount>1</totalInstanceCount><availableInstanceCount>1</availableInstanceCount>"
    "<state>active</state></capacityReservation></CreateCapacityReservationResponse>"
)
CANCEL_CR_XML = (
    '<CancelCapacityReservationResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
    "<requestId>{rid}</requestId><return>true</return></CancelCapacityReservationResponse>"
)


@dataclass
class Rule:
    action: str
    status: int
    body: str
    times: int
    forward_first: bool = False  # forward to moto, then answer with this (a lost answer)


@dataclass
class Ec2Proxy:
    """Forwards to moto; injects EC2 error answers by action; records every call."""

    upstream_port: int
    rules: list[Rule] = field(default_factory=list)
    calls: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    token_replies: dict[str, bytes] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, action: str, code: str, *, status: int = 400, times: int = 1,
             forward_first: bool = False) -> None:
        body = ERROR_XML.format(code=code, message=f"injected {code}", rid="11111111-2222-3333-4444-555555555555")
        self.rules.append(Rule(action, status, body, times, forward_first))

    def answer(self, action: str, body: str, times: int = 1) -> None:
        self.rules.append(Rule(action, 200, body, times))

    def actions(self) -> list[str]:
        return [a for a, _ in self.calls]

    def take_rule(self, action: str) -> Rule | None:
        with self.lock:
            for rule in self.rules:
                if rule.action == action and rule.times > 0:
                    rule.times -= 1
                    return rule
        return None

    def forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=30)
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        ctype = resp.getheader("Content-Type", "text/xml")
        conn.close()
        return resp.status, data, ctype


def make_handler(proxy: Ec2Proxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def reply(self, status: int, body: bytes, ctype: str = "text/xml") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            params = {k: v[0] for k, v in urllib.parse.parse_qs(body.decode()).items()}
            action = params.get("Action", "")
            with proxy.lock:
                proxy.calls.append((action, params))
            token = params.get("ClientToken")
            if action == "RunInstances" and token and token in proxy.token_replies:
                self.reply(200, proxy.token_replies[token])
                return
            rule = proxy.take_rule(action)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            if rule is None or rule.forward_first:
                status, data, ctype = proxy.forward("POST", self.path, headers, body)
                if action == "RunInstances" and token and status == 200:
                    proxy.token_replies[token] = data
                if rule is None:
                    self.reply(status, data, ctype)
                    return
            assert rule is not None
            self.reply(rule.status, rule.body.encode())

    return Handler


@pytest.fixture(scope="module")
def moto_port() -> Iterator[int]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield port
    server.stop()


@pytest.fixture
def proxy(moto_port: int) -> Iterator[tuple[Ec2Proxy, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", moto_port)
    conn.request("POST", "/moto-api/reset")
    conn.getresponse().read()
    state = Ec2Proxy(moto_port)
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), make_handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def clock() -> SimClock:
    return SimClock(start=1_700_000_000.0)


@pytest.fixture
def fleet(proxy: tuple[Ec2Proxy, str], aws_env: None, clock: SimClock) -> AwsFleet:
    _, url = proxy
    fleet = make_provider("aws", endpoint_url=url, zones=ZONES, instance_types=[GPU, "p4d.24xlarge"],
                          clock=clock, seed=7, image_id="ami-12c6146b")
    assert isinstance(fleet, AwsFleet)
    return fleet


def moto_backend() -> Any:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    return ec2_backends[DEFAULT_ACCOUNT_ID][REGION]


def request(intent: str = "intent-1", zone: str = "us-east-1a", market: Market = Market.SPOT,
            count: int = 1) -> LaunchRequest:
    return LaunchRequest(intent, zone, GPU, market, count,
                         {"node_id": "n-7", "job_id": "job-3", "tenant_id": "acme"})


def run_instances_params(p: Ec2Proxy) -> list[dict[str, str]]:
    return [params for action, params in p.calls if action == "RunInstances"]


def test_selected_by_name_and_speaks_the_protocol(fleet: AwsFleet) -> None:
    assert isinstance(fleet, FleetProvider)
    assert fleet.name == "aws" and fleet.region == REGION and fleet.zones == ZONES


def test_spot_launch_sends_one_time_terminate_and_tags(fleet: AwsFleet, proxy: tuple[Ec2Proxy, str]) -> None:
    p, _ = proxy
    [inst] = fleet.launch(request())
    sent = run_instances_params(p)[0]
    assert sent["InstanceMarketOptions.MarketType"] == "spot"
    assert sent["InstanceMarketOptions.SpotOptions.SpotInstanceType"] == "one-time"
    assert sent["InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior"] == "terminate"
    assert sent["ClientToken"] == "intent-1"
    assert sent["Placement.AvailabilityZone"] == "us-east-1a"
    assert inst.market == Market.SPOT and inst.zone == "us-east-1a" and inst.cloud == "aws"
    assert inst.accelerator == "A10G" and inst.accelerator_count == 1
    assert inst.intent_id == "intent-1"
    assert inst.tags == {"node_id": "n-7", "job_id": "job-3", "tenant_id": "acme"}
    # the tags are really on the instance in EC2
    raw = moto_backend().get_instance(inst.instance_id)
    assert raw.lifecycle == "spot"
    tags = {t["key"]: t["value"] for t in moto_backend().describe_tags(
        filters={"resource-id": [inst.instance_id]})}
    assert tags["spotplane:node_id"] == "n-7" and tags["spotplane:tenant_id"] == "acme"
    assert tags["spotplane:cluster"] == "spotplane"


def test_on_demand_launch_has_no_market_options(fleet: AwsFleet, proxy: tuple[Ec2Proxy, str]) -> None:
    p, _ = proxy
    [inst] = fleet.launch(request(market=Market.ON_DEMAND))
    assert not any(k.startswith("InstanceMarketOptions") for k in run_instances_params(p)[0])
    assert inst.market == Market.ON_DEMAND
    assert inst.price_per_hour == pytest.approx(1.006)


def test_retried_intent_is_found_by_its_tag(fleet: AwsFleet, proxy: tuple[Ec2Proxy, str]) -> None:
    """Same instances back: test_conformance; here, the retry does not even call RunInstances."""
    p, _ = proxy
    fleet.launch(request(count=2))
    fleet.launch(request(count=2))  # the caller retries the same intent
    assert len(run_instances_params(p)) == 1


def test_lost_answer_is_retried_with_the_same_client_token(
    fleet: AwsFleet, proxy: tuple[Ec2Proxy, str], clock: SimClock
) -> None:
    p, _ = proxy
    p.fail("RunInstances", "InternalError", status=500, forward_first=True)  # made it, answer lost
    [inst] = fleet.launch(request(intent="lost-answer"))
    tokens = [params["ClientToken"] for params in run_instances_params(p)]
    assert tokens == [client_token("lost-answer")] * 2
    assert [i.instance_id for i in fleet.describe()] == [inst.instance_id]
    assert len(fleet.backoff.slept) == 1


def test_long_intent_ids_make_valid_tokens() -> None:
    token = client_token("x" * 200)
    assert len(token) == 64 and token == client_token("x" * 200) and token != client_token("y" * 200)


@pytest.mark.parametrize("code", ["InsufficientInstanceCapacity", "MaxSpotInstanceCountExceeded",
                                  "SpotMaxPriceTooLow"])
def test_stockout_is_capacity_unavailable(fleet: AwsFleet, proxy: tuple[Ec2Proxy, str], code: str) -> None:
    p, _ = proxy
    p.fail("RunInstances", code, status=500 if code.startswith("Insufficient") else 400)
    with pytest.raises(CapacityUnavailable) as err:
        fleet.launch(request(zone="us-east-1b"))
    assert err.value.zone == "us-east-1b" and err.value.instance_type == GPU and err.value.reason == code
    assert fleet.describe() == []
    assert fleet.backoff.slept == []  # not retried: the caller moves on


def test_stockout_moves_to_the_next_zone(fleet: AwsFleet, proxy: tuple[Ec2Proxy, str]) -> None:
    p, _ = proxy
    p.fail("RunInstances", "InsufficientInstanceCapacity", status=500, times=2)
    zone, [inst] = launch_first_available(fleet, request(intent="walk"), ZONES)
    assert zone == "us-east-1c" and inst.zone == "us-east-1c"
    assert [params["Placement.AvailabilityZone"] for params in run_instances_params(p)] == ZONES
    p.fail("RunInstances", "InsufficientInstanceCapacity", status=500, times=3)
    with pytest.raises(CapacityUnavailable) as err:
        launch_first_available(fleet, request(intent="walk-2"), ZONES)
    assert err.value.zone == "us-east-1c"


def test_throttling_is_retried_with_jittered_backoff(
    fleet: AwsFleet, proxy: tuple[Ec2Proxy, str], clock: SimClock
) -> None:
    p, _ = proxy
    p.fail("DescribeInstances", "RequestLimitExceeded", status=503, times=3)
    t0 = clock.now()
    assert fleet.describe() == []
    assert p.actions().count("DescribeInstances") == 4
    slept = fleet.backoff.slept
    assert len(slept) == 3 and clock.now() - t0 == pytest.approx(sum(slept))
    assert all(0 <= s <= 0.5 * 2**i for i, s in enumerate(slept))
    assert len(set(slept)) == 3  # jittered, not a fixed ladder


def test_throttling_gives_up_after_the_budget(fleet: AwsFleet, proxy: tuple[Ec2Proxy, str]) -> None:
    p, _ = proxy
    p.fail("DescribeInstances", "RequestLimitExceeded", status=503, times=50)
    with pytest.raises(Exception, match="RequestLimitExceeded"):
        fleet.describe()
    assert p.actions().count("DescribeInstances") == fleet.backoff.attempts


def test_spot_interruption_events(fleet: AwsFleet, clock: SimClock) -> None:
    [spot] = fleet.launch(request(intent="spot"))
    [od] = fleet.launch(request(intent="od", market=Market.ON_DEMAND, zone="us-east-1b"))
    backend = moto_backend()
    for iid in (spot.instance_id, od.instance_id):
        backend.get_instance(iid).start()
    clock.advance(60)
    ready = fleet.poll_events()
    assert sorted((e.kind, e.instance_id) for e in ready) == sorted(
        [(EventKind.READY, spot.instance_id), (EventKind.READY, od.instance_id)])
    assert all(e.at == clock.now() for e in ready)
    assert fleet.poll_events() == []  # nothing new

    # EC2 marks the spot request: the two-minute notice
    [req] = backend.request_spot_instances(
        price="1.0", image_id="ami-12c6146b", count=1, spot_instance_type="one-time", valid_from=None,
        valid_until=None, launch_group=None, availability_zone_group=None, key_name="", security_groups=[],
        user_data=None, instance_type=GPU, placement="us-east-1a", kernel_id=None, ramdisk_id=None,
        monitoring_enabled=False, subnet_id="", tags={})
    req.instance.terminate()  # the helper instance moto made for the request
    req.instance = backend.get_instance(spot.instance_id)
    req._status_code = "marked-for-termination"
    clock.advance(5)
    [notice] = fleet.poll_events()
    assert notice.kind == EventKind.PREEMPTION_NOTICE and notice.instance_id == spot.instance_id
    assert notice.seconds_left == 120.0 and notice.zone == "us-east-1a"
    assert fleet.describe([spot.instance_id])[0].state == InstanceState.NOTICED

    # two minutes later EC2 terminates it with the spot reason
    inst = backend.get_instance(spot.instance_id)
    inst.terminate()
    inst.state_reason.code = "Server.SpotInstanceTermination"
    inst.state_reason.message = "Server.SpotInstanceTermination: Spot instance termination"
    clock.advance(120)
    [gone] = fleet.poll_events()
    assert (gone.kind, gone.instance_id, gone.detail) == (
        EventKind.PREEMPTED, spot.instance_id, "Server.SpotInstanceTermination")
    assert fleet.describe([spot.instance_id])[0].state == InstanceState.PREEMPTED

    # our own terminate is TERMINATED, not a preemption; unknown ids are ignored
    fleet.terminate([od.instance_id, "i-0000000000000dead"])
    [ended] = fleet.poll_events()
    assert (ended.kind, ended.instance_id) == (EventKind.TERMINATED, od.instance_id)
    assert fleet.describe([od.instance_id])[0].state == InstanceState.TERMINATED
    fleet.terminate([od.instance_id])  # already gone: no call, no error


def test_launch_failure_event(fleet: AwsFleet) -> None:
    [inst] = fleet.launch(request(intent="doomed"))
    raw = moto_backend().get_instance(inst.instance_id)
    raw.terminate()
    raw.state_reason.code = "Server.InsufficientInstanceCapacity"
    [event] = fleet.poll_events()
    assert event.kind == EventKind.LAUNCH_FAILED and event.detail == "Server.InsufficientInstanceCapacity"


def test_offers_and_spot_prices_come_from_ec2(
    fleet: AwsFleet, proxy: tuple[Ec2Proxy, str], moto_port: int
) -> None:
    p, _ = proxy
    offers = fleet.offers()
    assert {(o.zone, o.instance_type) for o in offers} == {(z, t) for z in ZONES for t in (GPU, "p4d.24xlarge")}
    p4d = next(o for o in offers if o.instance_type == "p4d.24xlarge")
    assert (p4d.accelerator, p4d.accelerator_count) == ("A100", 8)
    direct = boto3.client("ec2", region_name=REGION, endpoint_url=f"http://127.0.0.1:{moto_port}")
    moto_price = direct.describe_spot_price_history(
        InstanceTypes=[GPU], AvailabilityZone="us-east-1a")["SpotPriceHistory"][0]["SpotPrice"]
    g5 = next(o for o in offers if (o.zone, o.instance_type) == ("us-east-1a", GPU))
    assert g5.spot_price == pytest.approx(float(moto_price)) and g5.on_demand_price == pytest.approx(1.006)
    assert {"DescribeInstanceTypeOfferings", "DescribeSpotPriceHistory", "DescribeInstanceTypes"} <= set(p.actions())
    assert fleet.spot_available("us-east-1a", GPU)
    assert not fleet.spot_available("us-east-1a", "g5.2xlarge")  # not one of ours: not offered


def test_capacity_reservation_probe(fleet: AwsFleet, proxy: tuple[Ec2Proxy, str]) -> None:
    p, _ = proxy
    fleet.capacity_probe = "capacity-reservation"
    p.fail("CreateCapacityReservation", "InsufficientInstanceCapacity", status=500)
    assert fleet.spot_available("us-east-1a", GPU) is False
    p.answer("CreateCapacityReservation", CREATE_CR_XML.format(rid="r1", itype=GPU, zone="us-east-1b"))
    p.answer("CancelCapacityReservation", CANCEL_CR_XML.format(rid="r2"))
    assert fleet.spot_available("us-east-1b", GPU) is True
    cancel = [params for a, params in p.calls if a == "CancelCapacityReservation"]
    assert cancel == [{"Action": "CancelCapacityReservation", "Version": "2016-11-15",
                       "CapacityReservationId": "cr-0123456789abcdef0"}]
    fleet.capacity_probe = lambda zone, itype: zone == "us-east-1c"
    assert fleet.spot_available("us-east-1c", GPU) and not fleet.spot_available("us-east-1a", GPU)


def test_rejected_credentials_are_one_clear_error(fleet: AwsFleet, proxy: tuple[Ec2Proxy, str]) -> None:
    p, _ = proxy
    p.fail("DescribeInstances", "AuthFailure", status=401)
    with pytest.raises(CredentialsError, match=r"aws: describe_instances rejected the credentials \(AuthFailure\)"):
        fleet.launch(request())
    p.fail("DescribeInstances", "UnauthorizedOperation", status=403)
    with pytest.raises(CredentialsError, match="grant ec2:DescribeInstances"):
        fleet.describe()


def test_missing_credentials_or_region(monkeypatch: pytest.MonkeyPatch, aws_env: None) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(CredentialsError, match="aws: no credentials found") as err:
        make_provider("aws", zones=ZONES)
    assert "AWS_ACCESS_KEY_ID" in str(err.value) and err.value.exit_code == 2
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_REGION", raising=False)
    with pytest.raises(CredentialsError, match="aws: no region configured"):
        make_provider("aws", zones=ZONES)


def test_direct_construction_with_a_client(proxy: tuple[Ec2Proxy, str], aws_env: None) -> None:
    _, url = proxy
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=url,
                       config=Config(retries={"total_max_attempts": 1}))
    clock = SimClock()
    fleet = AwsFleet(ec2, region=REGION, zones=ZONES, instance_types=[GPU], clock=clock,
                     template=AwsLaunchTemplate(image_id="ami-12c6146b", key_name="k"),
                     backoff=Backoff(clock, rng=random.Random(1)))
    fleet.launch(request(market=Market.ON_DEMAND))
    assert len(fleet.describe()) == 1


def test_defaults_from_the_environment(monkeypatch: pytest.MonkeyPatch, aws_env: None) -> None:
    monkeypatch.setenv("SPOTPLANE_AWS_ZONES", "us-east-1d, us-east-1f")
    monkeypatch.setenv("SPOTPLANE_AWS_INSTANCE_TYPES", "p4d.24xlarge")
    monkeypatch.setenv("SPOTPLANE_AWS_IMAGE_ID", "ami-0abc")
    fleet = make_provider("aws")
    assert isinstance(fleet, AwsFleet)
    assert fleet.zones == ["us-east-1d", "us-east-1f"] and fleet.instance_types == ["p4d.24xlarge"]
    assert fleet.template.image_id == "ami-0abc" and fleet.region == REGION


def test_catalog_is_cached_on_the_clock(fleet: AwsFleet, proxy: tuple[Ec2Proxy, str], clock: SimClock) -> None:
    p, _ = proxy
    for _ in range(5):  # the controller probes every offer every tick
        assert fleet.spot_available("us-east-1a", GPU)
    assert p.actions().count("DescribeInstanceTypeOfferings") == 1
    assert p.actions().count("DescribeSpotPriceHistory") == 1
    clock.advance(fleet.catalog_ttl_s)
    fleet.spot_available("us-east-1b", GPU)
    assert p.actions().count("DescribeInstanceTypeOfferings") == 2


def test_describe_follows_next_token(fleet: AwsFleet, proxy: tuple[Ec2Proxy, str]) -> None:
    p, _ = proxy
    fleet.page_size = 5
    for i in range(7):  # EC2 pages by reservation: one run_instances each
        fleet.launch(request(intent=f"many-{i}"))
    p.calls.clear()
    assert len(fleet.describe()) == 7
    pages = [params for a, params in p.calls if a == "DescribeInstances"]
    assert len(pages) == 2 and "NextToken" in pages[1]
