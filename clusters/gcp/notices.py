"""GCP Spot VM preemption notices, read on the node from the GCE metadata server.

``GET /computeMetadata/v1/instance/preempted?wait_for_change=true`` with the header
``Metadata-Flavor: Google`` is a hanging GET that returns ``TRUE`` when preemption starts
(about 30 s before the VM stops); ``last_etag`` resumes the wait without missing a change.
``GET /computeMetadata/v1/instance/name`` is the VM's name, the id ``GcpFleet`` reports.
"""

from __future__ import annotations

import logging
import threading
import urllib.request

from clusters.notices import PreemptionNotice
from controlplane.core.clock import Clock, WallClock

log = logging.getLogger(__name__)

GCP_METADATA = "http://metadata.google.internal"
NOTICE_SECONDS = 30.0  # a preempted VM stops about 30 s after the notice


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
        return PreemptionNotice("gcp", "preempted", self.clock.now(), NOTICE_SECONDS, body)

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
