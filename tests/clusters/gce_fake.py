"""A local HTTP server speaking the few Compute Engine v1 REST endpoints GcpFleet uses.

Bodies follow the Compute API reference (resources ``Instance``, ``InstanceList``, ``Operation``,
``OperationList``, ``MachineType``; errors in the Google JSON error format) and the shapes seen in
real answers (an insert operation that ends ``DONE`` with ``error.errors[].code =
ZONE_RESOURCE_POOL_EXHAUSTED`` and ``httpErrorStatusCode``; a ``systemevent-...`` operation of type
``compute.instances.preempted`` by ``user: system``). The tests additionally parse every body
this server sends with the client library's own message types, unknown fields rejected, so a
misnamed field fails a test instead of being silently dropped.

Endpoints (all under ``/compute/v1/projects/{project}/zones/{zone}``):
``POST|GET /instances``, ``GET|DELETE /instances/{name}``, ``GET /operations``,
``POST /operations/{name}/wait``, ``GET /machineTypes/{name}``,
``GET /instances/{name}/serialPort`` (the ``SerialPortOutput`` of port 1: what
:attr:`GceFake.serial_output` says the VM wrote, e.g. its startup-script's log as the boot
emulator captured it).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

API = "https://www.googleapis.com/compute/v1"
PATH = re.compile(r"^/compute/v1/projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/"
                  r"(?P<collection>instances|operations|machineTypes)(?:/(?P<name>[^/]+))?(?:/(?P<verb>wait|serialPort))?$")
FILTER_TERM = re.compile(r'^\(?\s*(?P<field>[A-Za-z][\w.-]*)\s*=\s*"?(?P<value>[^")]*)"?\s*\)?$')

# name -> (guestCpus, memoryMb, accelerators as the API lists them)
MACHINE_TYPES: dict[str, tuple[int, int, list[dict[str, Any]]]] = {
    "g2-standard-4": (4, 16384, [{"guestAcceleratorType": "nvidia-l4", "guestAcceleratorCount": 1}]),
    "a2-highgpu-1g": (12, 87040, [{"guestAcceleratorType": "nvidia-tesla-a100", "guestAcceleratorCount": 1}]),
    "a3-highgpu-8g": (208, 1900544, [{"guestAcceleratorType": "nvidia-h100-80gb", "guestAcceleratorCount": 8}]),
    "n1-standard-8": (8, 30720, []),
}


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "-00:00")


def error_body(code: int, message: str, reason: str, domain: str = "global",
               status: str | None = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message,
                           "errors": [{"message": message, "domain": domain, "reason": reason}]}
    if status:
        err["status"] = status
    return {"error": err}


@dataclass
class Injected:
    method: str
    pattern: re.Pattern[str]
    status: int
    body: dict[str, Any]
    times: int


@dataclass
class GceFake:
    """The state behind the fake API, and the knobs a test turns."""

    project: str = "spotplane-test"
    zones: tuple[str, ...] = ("us-central1-a", "us-central1-b", "us-central1-c")
    offered: set[tuple[str, str]] = field(default_factory=set)  # (zone, machine type) sold
    stockout: dict[str, str] = field(default_factory=dict)  # zone -> error code for inserts
    instances: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    operations: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    request_ids: dict[str, tuple[str, str]] = field(default_factory=dict)
    injected: list[Injected] = field(default_factory=list)
    calls: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    sent: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (resource kind, body)
    running_rounds: int = 1  # insert operations stay RUNNING for this many wait calls
    network_prefix: str = "10.128.0"  # internal IPs are {network_prefix}.N (N from 2)
    serial_output: Callable[[str], str] = lambda name: ""  # a VM's serial port 1, by its name
    now: datetime = field(default_factory=lambda: datetime(2026, 1, 5, 12, 0, tzinfo=UTC))
    lock: threading.RLock = field(default_factory=threading.RLock)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(4_100_000_000_000_000_001))
    _waits: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.offered:
            self.offered = {(z, m) for z in self.zones for m in MACHINE_TYPES}

    # ------------------------------------------------------------- test knobs
    def inject(self, method: str, path_regex: str, status: int, body: dict[str, Any], times: int = 1) -> None:
        self.injected.append(Injected(method, re.compile(path_regex), status, body, times))

    def set_status(self, name: str, status: str) -> None:
        with self.lock:
            self._instance_named(name)["status"] = status

    def preempt(self, name: str) -> dict[str, Any]:
        """GCE preempts a Spot VM: a system operation, then STOPPING."""
        with self.lock:
            inst = self._instance_named(name)
            zone = inst["zone"].rsplit("/", 1)[-1]
            op = self._operation(zone, "compute.instances.preempted", inst, user="system",
                                 prefix="systemevent", status_message="Instance was preempted.")
            inst["status"] = "STOPPING"
            return op

    def finish_preemption(self, name: str) -> None:
        """The VM is gone: deleted (terminationAction DELETE) or TERMINATED (STOP)."""
        with self.lock:
            inst = self._instance_named(name)
            zone = inst["zone"].rsplit("/", 1)[-1]
            if inst["scheduling"].get("instanceTerminationAction") == "STOP":
                inst["status"] = "TERMINATED"
            else:
                del self.instances[(zone, name)]

    def names(self) -> list[str]:
        with self.lock:
            return sorted(n for _, n in self.instances)

    def _instance_named(self, name: str) -> dict[str, Any]:
        return next(v for (_, n), v in self.instances.items() if n == name)

    # ------------------------------------------------------------- resources
    def _tick(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now

    def _zone_url(self, zone: str) -> str:
        return f"{API}/projects/{self.project}/zones/{zone}"

    def _operation(self, zone: str, op_type: str, target: dict[str, Any], *, user: str = "spotplane@test.iam.gserviceaccount.com",
                   prefix: str = "operation", status: str = "DONE", status_message: str = "",
                   error_code: str = "") -> dict[str, Any]:
        t = self._tick()
        stamp = int(t.timestamp() * 1000)
        name = f"{prefix}-{stamp}-{next(self._ids):x}"[:60]
        op: dict[str, Any] = {
            "kind": "compute#operation", "id": str(next(self._ids)), "name": name,
            "creationTimestamp": rfc3339(t), "zone": self._zone_url(zone), "operationType": op_type,
            "targetLink": target["selfLink"], "targetId": target["id"], "status": status,
            "user": user, "progress": 100 if status == "DONE" else 0, "insertTime": rfc3339(t),
            "startTime": rfc3339(t), "selfLink": f"{self._zone_url(zone)}/operations/{name}",
        }
        if status == "DONE":
            op["endTime"] = rfc3339(t)
        if status_message:
            op["statusMessage"] = status_message
        if error_code:
            op["error"] = {"errors": [{
                "code": error_code,
                "message": f"The zone 'projects/{self.project}/zones/{zone}' does not have enough resources "
                           "available to fulfill the request.  Try a different zone, or try again later.",
                "errorDetails": [{"help": {"links": [{
                    "description": "Troubleshooting documentation",
                    "url": "https://cloud.google.com/compute/docs/resource-error"}]}}],
            }]}
            op["httpErrorStatusCode"] = 503 if "RESOURCE_POOL" in error_code else 403
            op["httpErrorMessage"] = "SERVICE UNAVAILABLE" if "RESOURCE_POOL" in error_code else "FORBIDDEN"
        self.operations[(zone, name)] = op
        return op

    def _new_instance(self, zone: str, body: dict[str, Any]) -> dict[str, Any]:
        t = self._tick()
        name = body["name"]
        url = f"{self._zone_url(zone)}/instances/{name}"
        scheduling = {"onHostMaintenance": "MIGRATE", "automaticRestart": True, "preemptible": False,
                      "provisioningModel": "STANDARD", **body.get("scheduling", {})}
        disk = body.get("disks", [{}])[0]
        inst: dict[str, Any] = {
            "kind": "compute#instance", "id": str(next(self._ids)), "creationTimestamp": rfc3339(t),
            "name": name, "tags": {"fingerprint": "42WmSpB8rSM="},
            "machineType": f"{self._zone_url(zone)}/machineTypes/{body['machineType'].rsplit('/', 1)[-1]}",
            "status": "PROVISIONING", "zone": self._zone_url(zone), "canIpForward": False,
            "networkInterfaces": [{
                "kind": "compute#networkInterface",
                "network": f"{API}/projects/{self.project}/global/networks/default",
                "networkIP": f"{self.network_prefix}.{len(self.instances) + 2}", "name": "nic0",
                "fingerprint": "ruOyFbP0K0M=", "stackType": "IPV4_ONLY",
            }],
            "disks": [{
                "kind": "compute#attachedDisk", "type": "PERSISTENT", "mode": "READ_WRITE",
                "source": f"{self._zone_url(zone)}/disks/{name}", "deviceName": "persistent-disk-0",
                "index": 0, "boot": True, "autoDelete": True, "interface": "SCSI",
                "diskSizeGb": str(disk.get("initializeParams", {}).get("diskSizeGb", "10")),
            }],
            "metadata": {"kind": "compute#metadata", "fingerprint": "pYXvMBVmmsw=",
                         **({"items": body["metadata"]["items"]} if body.get("metadata", {}).get("items") else {})},
            "selfLink": url, "scheduling": scheduling, "cpuPlatform": "Unknown CPU Platform",
            "labels": body.get("labels", {}), "labelFingerprint": "mfTqVQXEzsk=",
            "startRestricted": False, "deletionProtection": False, "fingerprint": "vjR5Wm8wXqE=",
            "lastStartTimestamp": rfc3339(t),
        }
        if body.get("guestAccelerators"):
            inst["guestAccelerators"] = [
                {"acceleratorType": f"{self._zone_url(zone)}/acceleratorTypes/{g['acceleratorType'].rsplit('/', 1)[-1]}",
                 "acceleratorCount": g.get("acceleratorCount", 1)} for g in body["guestAccelerators"]]
        return inst

    def machine_type(self, zone: str, name: str) -> dict[str, Any]:
        cpus, mem, accs = MACHINE_TYPES[name]
        body: dict[str, Any] = {
            "kind": "compute#machineType", "id": str(abs(hash(name)) % 10**12), "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
            "name": name, "description": f"{cpus} vCPUs, {mem // 1024} GB RAM", "guestCpus": cpus,
            "memoryMb": mem, "maximumPersistentDisks": 128, "maximumPersistentDisksSizeGb": "263168",
            "zone": zone, "selfLink": f"{self._zone_url(zone)}/machineTypes/{name}", "isSharedCpu": False,
        }
        if accs:
            body["accelerators"] = accs
        return body

    # ------------------------------------------------------------- dispatch
    def handle(self, method: str, raw_path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        parsed = urllib.parse.urlsplit(raw_path)
        query = {k: v[0] for k, v in urllib.parse.parse_qs(parsed.query).items()}
        with self.lock:
            self.calls.append((method, parsed.path, query))
            for rule in self.injected:
                if rule.method == method and rule.times > 0 and rule.pattern.search(parsed.path):
                    rule.times -= 1
                    return rule.status, rule.body
        m = PATH.match(parsed.path)
        if not m:
            return 404, error_body(404, f"The requested URL {parsed.path} was not found.", "notFound")
        project, zone, collection, name, verb = m.group("project", "zone", "collection", "name", "verb")
        if project != self.project:
            return 403, error_body(403, f"Required 'compute.instances.list' permission for 'projects/{project}'",
                                   "forbidden")
        if zone not in self.zones:
            return 400, error_body(400, f"Invalid value for field 'zone': '{zone}'. Unknown zone.", "invalid")
        with self.lock:
            return self._route(method, zone, collection, name, verb, query, body)

    def _route(self, method: str, zone: str, collection: str, name: str | None, verb: str | None,
               query: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        if collection == "machineTypes" and method == "GET" and name:
            if (zone, name) not in self.offered or name not in MACHINE_TYPES:
                return 404, error_body(404, f"The resource 'projects/{self.project}/zones/{zone}/machineTypes/{name}' was not found", "notFound")
            return self._send("MachineType", 200, self.machine_type(zone, name))
        if collection == "instances":
            return self._instances(method, zone, name, query, body, verb)
        if collection == "operations":
            if method == "GET" and not name:
                try:
                    items = [o for (z, _), o in self.operations.items()
                             if z == zone and matches(o, query.get("filter", ""))]
                except ValueError as exc:
                    return 400, error_body(400, f"Invalid list filter expression: {exc}", "invalid")
                if query.get("orderBy") == "creationTimestamp desc":
                    items = items[::-1]
                return self._send("OperationList", 200, self._page(
                    "compute#operationList", items, query, f"{self._zone_url(zone)}/operations"))
            if method == "POST" and name and verb == "wait":
                op = self.operations.get((zone, name))
                if op is None:
                    return 404, error_body(404, f"The resource 'projects/{self.project}/zones/{zone}/operations/{name}' was not found", "notFound")
                self._waits[name] = self._waits.get(name, 0) + 1
                if op["status"] != "DONE" and self._waits[name] >= self.running_rounds:
                    self._finish_insert(zone, op)
                return self._send("Operation", 200, op)
        return 400, error_body(400, f"unsupported {method} on {collection}", "invalid")

    def _serial_port(self, zone: str, name: str, query: dict[str, str],
                     not_found: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """``instances.getSerialPortOutput``: port 1's contents from byte ``start`` on."""
        if (zone, name) not in self.instances:
            return 404, not_found
        if query.get("port", "1") != "1":
            return 400, error_body(400, "Invalid value for field 'port': only port 1 is emulated", "invalid")
        text = self.serial_output(name)
        start = min(int(query.get("start") or 0), len(text.encode()))
        data = text.encode()[start:].decode(errors="replace")
        return self._send("SerialPortOutput", 200, {
            "kind": "compute#serialPortOutput", "contents": data, "start": str(start),
            "next": str(start + len(data.encode())),
            "selfLink": f"{self._zone_url(zone)}/instances/{name}/serialPort"})

    def _instances(self, method: str, zone: str, name: str | None, query: dict[str, str],
                   body: bytes, verb: str | None = None) -> tuple[int, dict[str, Any]]:
        not_found = error_body(404, f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' was not found", "notFound")
        if method == "GET" and name and verb == "serialPort":
            return self._serial_port(zone, name, query, not_found)
        if method == "GET" and name:
            inst = self.instances.get((zone, name))
            return (404, not_found) if inst is None else self._send("Instance", 200, inst)
        if method == "GET":
            try:
                items = [i for (z, _), i in self.instances.items() if z == zone and matches(i, query.get("filter", ""))]
            except ValueError as exc:
                return 400, error_body(400, f"Invalid list filter expression: {exc}", "invalid")
            return self._send("InstanceList", 200, self._page(
                "compute#instanceList", sorted(items, key=lambda i: i["name"]), query, f"{self._zone_url(zone)}/instances"))
        if method == "POST" and not name:
            return self._insert(zone, json.loads(body or b"{}"), query.get("requestId", ""))
        if method == "DELETE" and name:
            rid = query.get("requestId", "")
            if rid and rid in self.request_ids:
                return self._send("Operation", 200, self.operations[self.request_ids[rid]])
            inst = self.instances.pop((zone, name), None)
            if inst is None:
                return 404, not_found
            op = self._operation(zone, "delete", inst)
            if rid:
                self.request_ids[rid] = (zone, op["name"])
            return self._send("Operation", 200, op)
        return 400, error_body(400, f"unsupported {method} on instances", "invalid")

    def _insert(self, zone: str, body: dict[str, Any], rid: str) -> tuple[int, dict[str, Any]]:
        if rid and rid in self.request_ids:  # the same request again: the same operation
            return self._send("Operation", 200, self.operations[self.request_ids[rid]])
        name = body.get("name", "")
        if (zone, name) in self.instances:
            return 409, error_body(409, f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' already exists", "alreadyExists")
        machine = body.get("machineType", "").rsplit("/", 1)[-1]
        if (zone, machine) not in self.offered:
            return 400, error_body(400, f"Invalid value for field 'resource.machineType': '{body.get('machineType')}'. "
                                   f"Machine type with name '{machine}' does not exist in zone '{zone}'.", "invalid")
        inst = self._new_instance(zone, body)
        self.instances[(zone, name)] = inst
        op = self._operation(zone, "insert", inst, status="RUNNING" if self.running_rounds > 0 else "DONE")
        op["_machine"] = machine  # removed before sending
        if op["status"] == "DONE":
            self._finish_insert(zone, op)
        if rid:
            self.request_ids[rid] = (zone, op["name"])
        return self._send("Operation", 200, op)

    def _finish_insert(self, zone: str, op: dict[str, Any]) -> None:
        name = op["targetLink"].rsplit("/", 1)[-1]
        op["status"], op["progress"], op["endTime"] = "DONE", 100, rfc3339(self._tick())
        code = self.stockout.get(zone)
        if code:
            fresh = self._operation(zone, "insert", self.instances[(zone, name)], error_code=code)
            del self.operations[(zone, fresh["name"])]
            op.update({k: fresh[k] for k in ("error", "httpErrorStatusCode", "httpErrorMessage")})
            del self.instances[(zone, name)]  # the VM never came up

    def _page(self, kind: str, items: list[dict[str, Any]], query: dict[str, str], url: str) -> dict[str, Any]:
        start = int(query.get("pageToken") or 0)
        size = int(query.get("maxResults") or 500)
        body: dict[str, Any] = {"kind": kind, "id": f"projects/{self.project}/{url.rsplit('/', 3)[-3]}",
                                "items": items[start:start + size], "selfLink": url}
        if start + size < len(items):
            body["nextPageToken"] = str(start + size)
        if not body["items"]:
            del body["items"]
        return body

    def _send(self, kind: str, status: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        clean = strip_private(body)
        self.sent.append((kind, clean))
        return status, clean


def strip_private(body: Any) -> Any:
    if isinstance(body, dict):
        return {k: strip_private(v) for k, v in body.items() if not k.startswith("_")}
    if isinstance(body, list):
        return [strip_private(v) for v in body]
    return body


def lookup(resource: dict[str, Any], dotted: str) -> Any:
    value: Any = resource
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def matches(resource: dict[str, Any], expression: str) -> bool:
    """The subset of the list filter syntax used: ``(a.b = "v") AND (c = "w")``; else ValueError."""
    if not expression.strip():
        return True
    for term in re.split(r"\s+AND\s+", expression.strip()):
        m = FILTER_TERM.match(term.strip())
        if not m:
            raise ValueError(term)
        if str(lookup(resource, m.group("field"))) != m.group("value"):
            return False
    return True


class GceServer:
    """Serve a :class:`GceFake` on 127.0.0.1 (a free port) in a thread."""

    def __init__(self, fake: GceFake) -> None:
        self.fake = fake
        handler = _handler(fake)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> GceServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler(fake: GceFake) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, payload = fake.handle(self.command, self.path, body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _serve

    return Handler
