"""AWS spot interruption notices, read on the node from the EC2 instance metadata service.

``GET /latest/meta-data/spot/instance-action`` (IMDSv2: a session token from
``PUT /latest/api/token``) answers 404 until EC2 schedules the interruption, then
``{"action": "terminate"|"stop"|"hibernate", "time": "2026-01-05T12:02:00Z"}`` about two
minutes ahead. AWS advises polling every 5 s. ``GET /latest/meta-data/instance-id`` is the
EC2 ``InstanceId`` (``i-0abc...``) that ``AwsFleet`` reports.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from datetime import datetime

from clusters.notices import PreemptionNotice
from controlplane.core.clock import Clock, WallClock
from controlplane.core.errors import InvalidInput

log = logging.getLogger(__name__)

AWS_METADATA = "http://169.254.169.254"
NOTICE_SECONDS = 120.0  # EC2's two-minute interruption notice


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
