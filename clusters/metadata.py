"""On-node preemption-notice watchers: the cloud's metadata server says "this VM goes away soon".

- AWS: ``GET /latest/meta-data/spot/instance-action`` (IMDSv2: a session token from
  ``PUT /latest/api/token``) answers 404 until EC2 schedules the interruption, then
  ``{"action": "terminate"|"stop"|"hibernate", "time": "2026-01-05T12:02:00Z"}`` about two
  minutes ahead. AWS advises polling every 5 s.
- GCP: ``GET /computeMetadata/v1/instance/preempted?wait_for_change=true`` with the header
  ``Metadata-Flavor: Google`` is a hanging GET that returns ``TRUE`` when preemption starts
  (about 30 s before the VM stops); ``last_etag`` resumes the wait without missing a change.

The node's own identity (:func:`instance_identity`) comes from the same servers: AWS
``GET /latest/meta-data/instance-id`` (IMDSv2 token) is the EC2 ``InstanceId`` (``i-0abc...``),
GCP ``GET /computeMetadata/v1/instance/name`` is the VM's name; these are the ``Instance.id``
values ``clusters/aws.py`` and ``clusters/gcp.py`` report.

A :class:`NoticeWatch` runs one watcher on a daemon thread and calls the callback once, at
once, from that thread, whatever the node is doing (e.g. writing a checkpoint).
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from controlplane.core.clock import Clock, WallClock
from controlplane.core.errors import CloudError, InvalidInput

log = logging.getLogger(__name__)

AWS_METADATA = "http://169.254.169.254"
GCP_METADATA = "http://metadata.google.internal"
GCP_NOTICE_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class PreemptionNotice:
    """The metadata server's notice: what will happen and how long is left (control-plane clock)."""

    cloud: str
    action: str
    at: float
    seconds_left: float
    raw: str = ""


class NoticeWatcher(Protocol):
    cloud: str

    def instance_id(self) -> str:
        """This node's instance id as its cloud's fleet provider names it."""
        ...

    def wait(self, stop: threading.Event) -> PreemptionNotice | None:
        """Block until a notice arrives (returned) or ``stop`` is set (None)."""
        ...


class AwsSpotNoticeWatcher:
    """Polls the EC2 instance metadata service (IMDSv2) for the spot interruption notice."""

    cloud = "aws"

    def __init__(self, base_url: str = AWS_METADATA, *, clock: Clock | None = None,
                 poll_s: float = 5.0, token_ttl_s: int = 21600, timeout_s: float = 2.0) -> None:
        if poll_s <= 0:
            raise InvalidInput("poll_s", f"must be > 0, got {poll_s}", fix="AWS advises 5 seconds")
        self.base_url = base_url.rstrip("/")
        self.clock = clock or WallClock()
        self.poll_s = poll_s
        self.token_ttl_s = token_ttl_s
        self.timeout_s = timeout_s
        self._token = ""
        self._token_expires = 0.0

    def _fetch_token(self) -> str:
        if self._token and self.clock.now() < self._token_expires - 60:
            return self._token
        req = urllib.request.Request(f"{self.base_url}/latest/api/token", method="PUT",
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": str(self.token_ttl_s)})
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            self._token = resp.read().decode().strip()
        self._token_expires = self.clock.now() + self.token_ttl_s
        return self._token

    def instance_id(self) -> str:
        """This instance's EC2 id (``latest/meta-data/instance-id``), as ``AwsFleet`` names it."""
        req = urllib.request.Request(f"{self.base_url}/latest/meta-data/instance-id",
                                     headers={"X-aws-ec2-metadata-token": self._fetch_token()})
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            return str(resp.read().decode().strip())

    def check(self) -> PreemptionNotice | None:
        """One look at ``spot/instance-action``: the notice, or None while there is none."""
        for attempt in range(2):
            req = urllib.request.Request(f"{self.base_url}/latest/meta-data/spot/instance-action",
                                         headers={"X-aws-ec2-metadata-token": self._fetch_token()})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    body = resp.read().decode()
                break
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return None
                if exc.code == 401 and attempt == 0:  # token expired: get a new one, once
                    self._token = ""
                    continue
                raise
        doc = json.loads(body)
        now = self.clock.now()
        when = datetime.fromisoformat(doc["time"].replace("Z", "+00:00")).timestamp()
        return PreemptionNotice("aws", doc.get("action", "terminate"), now, max(0.0, when - now), body)

    def wait(self, stop: threading.Event) -> PreemptionNotice | None:
        while not stop.is_set():
            try:
                notice = self.check()
            except (OSError, ValueError, KeyError) as exc:  # IMDS hiccup: keep watching
                log.warning("spot instance-action check failed: %s", exc)
                notice = None
            if notice is not None:
                return notice
            stop.wait(self.poll_s)
        return None


class GcpPreemptionWatcher:
    """Hangs on the GCE metadata server's ``instance/preempted`` until it turns TRUE."""

    cloud = "gcp"

    def __init__(self, base_url: str = GCP_METADATA, *, clock: Clock | None = None,
                 hang_s: int = 60, retry_s: float = 1.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.clock = clock or WallClock()
        self.hang_s = hang_s
        self.retry_s = retry_s
        self.etag = ""

    def instance_id(self) -> str:
        """This VM's name (``instance/name``), the id ``GcpFleet`` gives its instances."""
        req = urllib.request.Request(f"{self.base_url}/computeMetadata/v1/instance/name",
                                     headers={"Metadata-Flavor": "Google"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            return str(resp.read().decode().strip())

    def check(self, wait_for_change: bool = False) -> PreemptionNotice | None:
        """Read ``preempted`` (hanging until it changes when asked); a notice when it is TRUE."""
        url = f"{self.base_url}/computeMetadata/v1/instance/preempted"
        if wait_for_change:
            url += f"?wait_for_change=true&timeout_sec={self.hang_s}"
            if self.etag:
                url += f"&last_etag={self.etag}"
        req = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
        with urllib.request.urlopen(req, timeout=self.hang_s + 10 if wait_for_change else 5) as resp:
            body = resp.read().decode().strip()
            self.etag = resp.headers.get("ETag", self.etag)
        if body.upper() != "TRUE":
            return None
        return PreemptionNotice("gcp", "preempted", self.clock.now(), GCP_NOTICE_SECONDS, body)

    def wait(self, stop: threading.Event) -> PreemptionNotice | None:
        first = True
        while not stop.is_set():
            try:
                notice = self.check(wait_for_change=not first)
                first = False
            except (OSError, ValueError) as exc:
                log.warning("metadata preempted watch failed: %s", exc)
                stop.wait(self.retry_s)
                continue
            if notice is not None:
                return notice
        return None


class NoticeWatch:
    """Runs a watcher on a daemon thread; ``on_notice`` fires once, from that thread, at once."""

    def __init__(self, watcher: NoticeWatcher, on_notice: Callable[[PreemptionNotice], None]) -> None:
        self.watcher = watcher
        self.on_notice = on_notice
        self.notice: PreemptionNotice | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{watcher.cloud}-notice-watch", daemon=True)

    def start(self) -> NoticeWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        notice = self.watcher.wait(self._stop)
        if notice is None:
            return
        self.notice = notice
        log.warning("preemption notice from %s metadata: %s, %.0fs left", notice.cloud, notice.action,
                    notice.seconds_left)
        try:
            self.on_notice(notice)
        except Exception:  # the callback's failure must not go unseen
            log.exception("preemption notice callback failed")

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()


def watcher_for(cloud: str, base_url: str | None = None, clock: Clock | None = None) -> NoticeWatcher:
    """The watcher for ``cloud`` ('aws' or 'gcp'), optionally at a test metadata server."""
    if cloud == "aws":
        return AwsSpotNoticeWatcher(base_url or AWS_METADATA, clock=clock)
    if cloud == "gcp":
        return GcpPreemptionWatcher(base_url or GCP_METADATA, clock=clock)
    raise InvalidInput("cloud", f"no metadata watcher for {cloud!r}", fix="use 'aws' or 'gcp'")


def instance_identity(cloud: str, base_url: str | None = None) -> str:
    """This node's instance id from its metadata server (EC2 instance id, GCE VM name)."""
    ident = watcher_for(cloud, base_url).instance_id()
    if not ident:
        raise CloudError(f"{cloud} metadata server gave an empty instance id",
                         fix="is this process on a cloud VM (or is the metadata URL right)?")
    return ident
