"""A workload cluster's head on one on-demand instance (``spotplane clusters add --launch``).

:func:`launch_head` launches ONE on-demand instance through a fleet provider whose bootstrap is
the head variant of the cloud's template (:func:`clusters.bootstrap.render_head`), waits, within
a bound, until the cloud shows it running and the head answers (its GCS port takes a
connection and its dashboard answers HTTP), and returns where it listens. A head that does not
answer in time is terminated (not left running and billed) and reported with the instance's
id and the last lines of its console, where the bootstrap's log goes.
"""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from clusters.bootstrap import HeadPorts, render_head
from clusters.fleet import FleetProvider, InstanceState, LaunchRequest
from clusters.providers import make_provider
from controlplane.core.errors import CloudError, InvalidInput
from controlplane.core.models import Market

HEAD_FLEET_TAG = "spotplane-head"  # the provider's cluster tag: the controller's fleet never sees heads
HEAD_OPTIONS = {"aws": ("instance_types", "user_data"), "gcp": ("machine_types", "startup_script")}
GONE = (InstanceState.TERMINATED, InstanceState.PREEMPTED)


@runtime_checkable
class HeadHosting(Protocol):
    """What a fleet provider offers to host a head: the instance's private address and the
    last lines of its console (the bootstrap's log)."""

    def private_address(self, instance_id: str) -> str | None: ...

    def console_tail(self, instance_id: str, lines: int = 20) -> str: ...


@dataclass(frozen=True)
class HeadRequest:
    """One head to launch: the cluster's name, where, on what, and its Ray token's reference."""

    name: str
    cloud: str
    zone: str
    instance_type: str
    token_ref: str
    hook: str = ""
    ports: HeadPorts = HeadPorts()


@dataclass(frozen=True)
class LaunchedHead:
    """A head that answers: its instance and where it listens."""

    instance_id: str
    zone: str
    private_ip: str
    ports: HeadPorts

    @property
    def gcs_address(self) -> str:
        return f"{self.private_ip}:{self.ports.ray_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://{self.private_ip}:{self.ports.dashboard_port}"


class HeadDidNotAnswer(CloudError):
    """The head's instance did not run, or its head did not answer, within the wait."""


def head_fleet(request: HeadRequest, options: dict[str, Any] | None = None) -> FleetProvider:
    """The cloud's provider, tagged apart from the controller's fleet, launching the head's
    bootstrap as its instances' script (``user_data`` / ``startup-script``)."""
    names = HEAD_OPTIONS.get(request.cloud)
    if names is None:
        raise InvalidInput("fleet", f"{request.cloud!r} cannot launch a head",
                           fix=f"use one of {', '.join(sorted(HEAD_OPTIONS))}")
    types_option, script_option = names
    script = render_head(request.cloud, request.name, request.instance_type, request.token_ref,
                         request.hook, request.ports)
    return make_provider(request.cloud, **{"zones": [request.zone], types_option: [request.instance_type],
                                           script_option: script, "cluster": HEAD_FLEET_TAG,
                                           **(options or {})})


def removal_fleet(cloud: str, zones: list[str], options: dict[str, Any] | None = None) -> FleetProvider:
    """The provider that terminates a launched head (tagged as :func:`head_fleet` tags it)."""
    if cloud not in HEAD_OPTIONS:
        raise InvalidInput("cloud", f"{cloud!r} launches no heads", fix="remove it without --launch")
    return make_provider(cloud, **{"zones": zones, "cluster": HEAD_FLEET_TAG, **(options or {})})


def answers(ip: str, ports: HeadPorts, timeout_s: float = 3.0) -> bool:
    """Whether the head answers: its GCS port takes a connection and its dashboard answers
    HTTP (any status: a token-protected API answering 401 answers)."""
    try:
        with socket.create_connection((ip, ports.ray_port), timeout=timeout_s):
            pass
    except OSError:
        return False
    try:
        with urllib.request.urlopen(f"http://{ip}:{ports.dashboard_port}/api/version",
                                    timeout=timeout_s):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


@dataclass
class HeadWait:
    """How long to wait and how to tell the operator: the bound, the pace, the progress line,
    the probe and the pause (injected for tests)."""

    timeout_s: float = 900.0
    poll_s: float = 5.0
    progress: Callable[[str], None] = print
    probe: Callable[[str, HeadPorts], bool] = answers
    sleep: Callable[[float], None] = time.sleep


def launch_head(fleet: FleetProvider, request: HeadRequest, wait: HeadWait | None = None) -> LaunchedHead:
    """Launch the head's on-demand instance and wait until it runs and answers."""
    if not isinstance(fleet, HeadHosting):
        raise InvalidInput("fleet", f"{fleet.name} cannot host a head (no private address)",
                           fix="launch the head on aws or gcp")
    wait = wait or HeadWait()
    intent = f"head-{request.name}-{uuid.uuid4().hex[:8]}"
    [instance] = fleet.launch(LaunchRequest(intent, request.zone, request.instance_type,
                                            Market.ON_DEMAND, tags={"role": "head",
                                                                    "workload_cluster": request.name}))
    iid = instance.instance_id
    wait.progress(f"launched {iid} ({request.instance_type} on demand in {request.zone}); "
                  f"waiting up to {wait.timeout_s:g} s for its head")
    try:
        return _await_head(fleet, request, iid, wait)
    except HeadDidNotAnswer:
        fleet.terminate([iid])
        raise


def _await_head(fleet: Any, request: HeadRequest, iid: str, wait: HeadWait) -> LaunchedHead:
    """Poll the instance's state, then the head, until it answers or the wait runs out."""
    deadline = time.monotonic() + wait.timeout_s
    seen: str | None = None
    while time.monotonic() < deadline:
        found = fleet.describe([iid])
        instance = found[0] if found else None
        state = instance.state if instance is not None else InstanceState.TERMINATED
        if state in GONE:
            raise _not_answering(fleet, iid, f"the instance ended ({state.value})")
        ip = fleet.private_address(iid) if state is InstanceState.RUNNING else None
        now = f"{state.value}" + (f" at {ip}" if ip else "")
        if now != seen:
            wait.progress(f"{iid}: {now}")
            seen = now
        if ip and wait.probe(ip, request.ports):
            wait.progress(f"{iid}: the head answers at {ip}:{request.ports.ray_port}")
            return LaunchedHead(iid, request.zone, ip, request.ports)
        wait.sleep(wait.poll_s)
    raise _not_answering(fleet, iid, f"no head answered within {wait.timeout_s:g} s")


def _not_answering(fleet: Any, iid: str, why: str) -> HeadDidNotAnswer:
    try:
        tail = fleet.console_tail(iid)
    except Exception as exc:  # noqa: BLE001 - the console is what we show, not what we need
        tail = f"(no console output: {exc})"
    return HeadDidNotAnswer(
        f"the head on {iid} did not come up: {why}; it was terminated. Its bootstrap's last "
        f"lines:\n{tail or '(empty console)'}",
        fix="check the image (python3, curl), the network (the head's ports reachable from "
            "here) and the token_ref, then run clusters add --launch again")
