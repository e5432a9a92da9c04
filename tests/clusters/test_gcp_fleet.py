"""GcpFleet with the real google-cloud-compute client (REST, anonymous credentials) on a local Compute API."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.cloud import compute_v1

from clusters.cloudcalls import launch_first_available
from clusters.fleet import EventKind, FleetProvider, InstanceState, LaunchRequest
from clusters.gcp.fleet import GcpFleet, instance_name, label_value, request_id
from clusters.providers import make_provider
from controlplane.core.clock import SimClock
from controlplane.core.errors import CapacityUnavailable, CredentialsError
from controlplane.core.models import Market


def _load_fake() -> Any:
    path = Path(__file__).with_name("gce_fake.py")
    spec = importlib.util.spec_from_file_location("spotplane_tests_gce_fake", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gce_fake = _load_fake()
ZONES = ["us-central1-a", "us-central1-b", "us-central1-c"]
PROJECT = "spotplane-test"
MESSAGE_TYPES: dict[str, Any] = {"Instance": compute_v1.Instance, "InstanceList": compute_v1.InstanceList,
                 "Operation": compute_v1.Operation, "OperationList": compute_v1.OperationList,
                 "MachineType": compute_v1.MachineType, "SerialPortOutput": compute_v1.SerialPortOutput}


@pytest.fixture
def fake() -> Iterator[Any]:
    state = gce_fake.GceFake(project=PROJECT, zones=tuple(ZONES))
    yield state
    # every body the server sent parses strictly into the client's own message types
    for kind, body in state.sent:
        MESSAGE_TYPES[kind].from_json(gce_fake.json.dumps(body), ignore_unknown_fields=False)


@pytest.fixture
def server(fake: Any) -> Iterator[Any]:
    with gce_fake.GceServer(fake) as srv:
        yield srv


@pytest.fixture
def clock() -> SimClock:
    return SimClock(start=1_700_000_000.0)


@pytest.fixture
def fleet(server: Any, clock: SimClock) -> GcpFleet:
    fleet = make_provider("gcp", project=PROJECT, zones=ZONES, credentials="anonymous",
                          api_endpoint=server.endpoint, clock=clock, seed=3,
                          machine_types=["g2-standard-4", "a2-highgpu-1g", "n1-standard-8"])
    assert isinstance(fleet, GcpFleet)
    return fleet


def request(intent: str = "intent-1", zone: str = "us-central1-a", market: Market = Market.SPOT,
            machine: str = "g2-standard-4", count: int = 1) -> LaunchRequest:
    return LaunchRequest(intent, zone, machine, market, count,
                         {"node_id": "n-7", "job_id": "job-3", "tenant_id": "Acme Corp"})


def inserts(fake: Any) -> list[tuple[str, str, dict[str, str]]]:
    return [c for c in fake.calls if c[0] == "POST" and c[1].endswith("/instances")]


def test_selected_by_name_and_speaks_the_protocol(fleet: GcpFleet) -> None:
    assert isinstance(fleet, FleetProvider) and fleet.name == "gcp" and fleet.project == PROJECT


def test_spot_vm_insert_body(fleet: GcpFleet, fake: Any) -> None:
    [inst] = fleet.launch(request())
    raw = fake.instances[("us-central1-a", instance_name("intent-1", 0))]
    assert raw["scheduling"]["provisioningModel"] == "SPOT"
    assert raw["scheduling"]["instanceTerminationAction"] == "DELETE"
    assert raw["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert raw["labels"]["spotplane-tenant_id"] == label_value("Acme Corp") != "Acme Corp"
    assert raw["labels"]["spotplane-node_id"] == "n-7" and raw["labels"]["spotplane-cluster"] == "spotplane"
    assert "guestAccelerators" not in raw  # g2 bundles its L4
    assert inst.market == Market.SPOT and inst.state == InstanceState.PENDING
    assert (inst.accelerator, inst.accelerator_count) == ("L4", 1)
    assert inst.intent_id == "intent-1" and inst.tags["tenant_id"] == "Acme Corp"  # exact, from metadata
    assert inst.price_per_hour == pytest.approx(0.2824)
    [(_, _, query)] = inserts(fake)
    assert query["requestId"] == request_id("intent-1", "insert-0")
    waits = [c for c in fake.calls if c[1].endswith("/wait")]
    assert len(waits) == 1  # the insert was RUNNING once, then DONE


def test_standard_vm_with_attached_gpus(fleet: GcpFleet, fake: Any) -> None:
    [inst] = fleet.launch(request(market=Market.ON_DEMAND, machine="n1-standard-8"))
    raw = fake.instances[("us-central1-a", inst.instance_id)]
    assert raw["scheduling"]["provisioningModel"] == "STANDARD"
    assert "instanceTerminationAction" not in raw["scheduling"]
    assert raw["guestAccelerators"][0]["acceleratorType"].endswith("/zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4")
    assert raw["guestAccelerators"][0]["acceleratorCount"] == 1
    assert (inst.market, inst.accelerator, inst.accelerator_count) == (Market.ON_DEMAND, "T4", 1)
    assert inst.price_per_hour == pytest.approx(0.73)


def test_retried_intent_inserts_nothing_more(fleet: GcpFleet, fake: Any) -> None:
    """Same VMs back: test_conformance; here, the retry sends no second insert."""
    fleet.launch(request(count=2))
    fleet.launch(request(count=2))
    assert len(inserts(fake)) == 2 and len(fake.names()) == 2


def test_lost_insert_answer_is_the_same_operation(fleet: GcpFleet, fake: Any) -> None:
    """The insert reached GCE but its answer was lost (503): the retry carries the same requestId."""
    real = fake.handle

    lost = {"done": False}

    def lose_first(method: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        status, payload = real(method, path, body)
        if method == "POST" and path.split("?")[0].endswith("/instances") and not lost["done"]:
            lost["done"] = True
            return 503, gce_fake.error_body(503, "The service is currently unavailable.", "backendError")
        return status, payload

    fake.handle = lose_first
    [inst] = fleet.launch(request(intent="lost"))
    rids = [q["requestId"] for _, _, q in inserts(fake)]
    assert rids == [request_id("lost", "insert-0")] * 2
    assert fake.names() == [inst.instance_id] and len(fleet.backoff.slept) == 1


@pytest.mark.parametrize("code", ["ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
                                  "QUOTA_EXCEEDED"])
def test_stockout_is_capacity_unavailable(fleet: GcpFleet, fake: Any, code: str) -> None:
    fake.stockout["us-central1-b"] = code
    with pytest.raises(CapacityUnavailable) as err:
        fleet.launch(request(zone="us-central1-b"))
    assert (err.value.zone, err.value.instance_type, err.value.reason) == ("us-central1-b", "g2-standard-4", code)
    assert fake.names() == [] and fleet.backoff.slept == []


def test_stockout_moves_to_the_next_zone(fleet: GcpFleet, fake: Any) -> None:
    fake.stockout.update({"us-central1-a": "ZONE_RESOURCE_POOL_EXHAUSTED", "us-central1-b": "QUOTA_EXCEEDED"})
    zone, [inst] = launch_first_available(fleet, request(intent="walk"), ZONES)
    assert zone == "us-central1-c" and inst.zone == "us-central1-c"
    assert [c[1].split("/")[6] for c in inserts(fake)] == ZONES


def test_sync_quota_error_is_capacity_unavailable(fleet: GcpFleet, fake: Any) -> None:
    fake.inject("POST", r"/instances$", 403, gce_fake.error_body(
        403, "Quota 'NVIDIA_L4_GPUS' exceeded.  Limit: 0.0 in region us-central1.", "quotaExceeded",
        domain="usageLimits"))
    with pytest.raises(CapacityUnavailable, match="quotaExceeded"):
        fleet.launch(request())


def test_rate_limits_are_retried_with_jittered_backoff(fleet: GcpFleet, fake: Any, clock: SimClock) -> None:
    fake.inject("GET", r"/instances$", 403, gce_fake.error_body(
        403, "Rate Limit Exceeded", "rateLimitExceeded", domain="usageLimits"), times=2)
    fake.inject("GET", r"/instances$", 429, gce_fake.error_body(
        429, "Quota exceeded for quota metric 'Read requests'", "rateLimitExceeded", status="RESOURCE_EXHAUSTED"))
    t0 = clock.now()
    assert fleet.describe() == []
    slept = fleet.backoff.slept
    assert len(slept) == 3 and clock.now() - t0 == pytest.approx(sum(slept)) and len(set(slept)) == 3


def test_preemption_events_from_zone_operations(fleet: GcpFleet, fake: Any, clock: SimClock) -> None:
    [spot] = fleet.launch(request(intent="spot"))
    [std] = fleet.launch(request(intent="std", zone="us-central1-c", market=Market.ON_DEMAND))
    fake.set_status(spot.instance_id, "RUNNING")
    fake.set_status(std.instance_id, "RUNNING")
    clock.advance(30)
    assert sorted((e.kind, e.instance_id) for e in fleet.poll_events()) == sorted(
        [(EventKind.READY, spot.instance_id), (EventKind.READY, std.instance_id)])
    assert fleet.poll_events() == []

    fake.set_status(spot.instance_id, "RUNNING")
    op = fake.preempt(spot.instance_id)
    fake.set_status(spot.instance_id, "RUNNING")  # the operation is seen before the VM stops
    [notice] = fleet.poll_events()
    assert notice.kind == EventKind.PREEMPTION_NOTICE and notice.seconds_left == 30.0
    assert fleet.describe([spot.instance_id])[0].state == InstanceState.NOTICED
    fake.set_status(spot.instance_id, "STOPPING")
    clock.advance(30)
    [gone] = fleet.poll_events()
    assert (gone.kind, gone.instance_id, gone.zone, gone.at) == (
        EventKind.PREEMPTED, spot.instance_id, "us-central1-a", clock.now())
    fake.finish_preemption(spot.instance_id)  # terminationAction DELETE: the VM disappears
    assert fleet.poll_events() == []
    lists = [q for m, p, q in fake.calls if p.endswith("/operations") and m == "GET"]
    assert lists[-1]["filter"] == 'operationType = "compute.instances.preempted"'
    assert op["user"] == "system" and op["name"].startswith("systemevent-")

    fleet.terminate([std.instance_id, "sp-does-not-exist-0"])
    [ended] = fleet.poll_events()
    assert (ended.kind, ended.instance_id) == (EventKind.TERMINATED, std.instance_id)
    assert fleet.describe([std.instance_id])[0].state == InstanceState.TERMINATED
    fleet.terminate([std.instance_id])  # gone already: ignored


def test_preempted_straight_to_gone(fleet: GcpFleet, fake: Any) -> None:
    [spot] = fleet.launch(request(intent="quick"))
    fake.set_status(spot.instance_id, "RUNNING")
    assert [e.kind for e in fleet.poll_events()] == [EventKind.READY]
    fake.preempt(spot.instance_id)
    fake.finish_preemption(spot.instance_id)
    [gone] = fleet.poll_events()
    assert gone.kind == EventKind.PREEMPTED and gone.detail == "compute.instances.preempted"
    # GCE deleted the VM; describe still shows its last view, as preempted, for the controller
    [seen] = fleet.describe([spot.instance_id])
    assert seen.state == InstanceState.PREEMPTED and seen.zone == "us-central1-a"
    assert [i.state for i in fleet.describe()] == [InstanceState.PREEMPTED]


def test_offers_from_machine_types(fleet: GcpFleet, fake: Any) -> None:
    fake.offered.discard(("us-central1-b", "a2-highgpu-1g"))
    offers = fleet.offers()
    assert len(offers) == 3 * 3 - 1
    a2 = next(o for o in offers if o.instance_type == "a2-highgpu-1g")
    assert (a2.accelerator, a2.accelerator_count, a2.spot_price, a2.region) == (
        "A100", 1, pytest.approx(1.1028), "us-central1")
    assert not fleet.spot_available("us-central1-b", "a2-highgpu-1g")
    assert fleet.spot_available("us-central1-a", "a2-highgpu-1g")
    fleet.capacity_probe = lambda zone, mt: zone != "us-central1-a"
    assert not fleet.spot_available("us-central1-a", "a2-highgpu-1g")


def test_rejected_credentials_are_one_clear_error(fleet: GcpFleet, fake: Any) -> None:
    fake.inject("GET", r"/instances$", 401, {"error": {
        "code": 401, "status": "UNAUTHENTICATED",
        "message": "Request had invalid authentication credentials. Expected OAuth 2 access token, "
                   "login cookie or other valid authentication credential.",
        "errors": [{"message": "Invalid Credentials", "domain": "global", "reason": "authError",
                    "location": "Authorization", "locationType": "header"}]}})
    # google-auth answers a 401 by refreshing the token; anonymous (or revoked) ones cannot be
    with pytest.raises(CredentialsError, match=r"gcp: instances.list rejected the credentials \(.*cannot be refreshed"):
        fleet.describe()
    fake.inject("POST", r"/instances$", 403, gce_fake.error_body(
        403, "Required 'compute.instances.create' permission for 'projects/spotplane-test/zones/us-central1-a/instances/x'",
        "forbidden"))
    with pytest.raises(CredentialsError, match="roles/compute.instanceAdmin.v1"):
        fleet.launch(request())


def test_missing_credentials_or_project(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))  # no gcloud login
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # not on a GCE VM: skip the metadata server
    with pytest.raises(CredentialsError, match="gcp: no credentials found") as err:
        make_provider("gcp", zones=ZONES)
    assert "GOOGLE_APPLICATION_CREDENTIALS" in str(err.value) and err.value.exit_code == 2
    with pytest.raises(CredentialsError, match="gcp: no project configured"):
        make_provider("gcp", zones=ZONES, credentials="anonymous")


def test_defaults_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTPLANE_GCP_ZONES", "europe-west4-a,europe-west4-b")
    monkeypatch.setenv("SPOTPLANE_GCP_MACHINE_TYPES", "a3-highgpu-8g")
    fleet = make_provider("gcp", project="p", credentials="anonymous")
    assert isinstance(fleet, GcpFleet)
    assert fleet.zones == ["europe-west4-a", "europe-west4-b"] and fleet.machine_types_wanted == ["a3-highgpu-8g"]


def test_list_follows_next_page_token(fleet: GcpFleet, fake: Any) -> None:
    fleet.page_size = 2
    fleet.launch(request(intent="many", count=3))
    fake.calls.clear()
    assert len(fleet.describe(None)) == 3
    lists = [q for m, p, q in fake.calls if m == "GET" and p.endswith("us-central1-a/instances")]
    assert len(lists) == 2 and lists[1]["pageToken"] == "2"
