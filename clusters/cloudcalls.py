"""What every real-cloud provider shares: jittered retries of throttled calls, and trying zones in turn.

``Backoff`` is "full jitter" exponential backoff (sleep ``U(0, min(cap, base * 2**attempt))``)
on the control plane's :class:`~controlplane.core.clock.Clock`, so tests step a ``SimClock`` instead
of sleeping. ``launch_first_available`` is how a caller turns "no spot here now"
(:class:`~controlplane.core.errors.CapacityUnavailable`) into "try the next zone".
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from clusters.fleet import FleetProvider, Instance, LaunchRequest
from controlplane.core.clock import Clock
from controlplane.core.errors import CapacityUnavailable, InvalidInput

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class Backoff:
    """Full-jitter exponential backoff: at most ``attempts`` tries of one call."""

    clock: Clock
    attempts: int = 6
    base_s: float = 0.5
    cap_s: float = 20.0
    rng: random.Random = field(default_factory=random.Random)
    slept: list[float] = field(default_factory=list)  # every pause taken, for logs and tests

    def delay(self, attempt: int) -> float:
        """The pause before retry number ``attempt`` (0-based)."""
        return self.rng.uniform(0.0, min(self.cap_s, self.base_s * (2**attempt)))

    def call(self, fn: Callable[[], T], retryable: Callable[[Exception], bool], what: str) -> T:
        """Run ``fn``; on an exception ``retryable`` accepts, pause and run it again."""
        for attempt in range(self.attempts):
            try:
                return fn()
            except Exception as exc:
                if not retryable(exc) or attempt == self.attempts - 1:
                    raise
                pause = self.delay(attempt)
                self.slept.append(pause)
                log.warning("%s throttled or failed transiently (%s); retry %d in %.2fs",
                            what, exc, attempt + 1, pause)
                self.clock.sleep(pause)
        raise AssertionError("unreachable")  # pragma: no cover


def launch_first_available(
    provider: FleetProvider, request: LaunchRequest, zones: Sequence[str]
) -> tuple[str, list[Instance]]:
    """Launch ``request`` in the first of ``zones`` with capacity; returns (zone, instances).

    Each zone gets its own intent id (``<intent>@<zone>``) so a retry of the whole walk stays
    idempotent per zone. Raises the last ``CapacityUnavailable`` when every zone is out.
    """
    if not zones:
        raise InvalidInput("zones", "no zone to try", fix="pass at least one zone")
    last: CapacityUnavailable | None = None
    for zone in zones:
        attempt = replace(request, zone=zone, intent_id=f"{request.intent_id}@{zone}")
        try:
            return zone, provider.launch(attempt)
        except CapacityUnavailable as exc:
            log.info("no capacity for %s in %s (%s); trying the next zone",
                     request.instance_type, zone, exc.reason)
            last = exc
    assert last is not None
    raise last
