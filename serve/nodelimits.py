"""The request rate of a launched node's reports (``/v1/nodes/*``), bounded before any credential
is checked.

Those routes take no tenant token, so the per-tenant buckets (:mod:`serve.limits`) do not bound
them. :class:`NodeReportLimiter` keeps two sets of token buckets in the replica's memory: one per
instance id the path names and one per client address, so a flood of forged reports is refused
(429) before the store is read or an HMAC computed, and one noisy instance does not slow another.
Each replica keeps its own buckets: N replicas allow N times the rate.
"""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.core.errors import RateLimited
from serve.limits import ApiLimits, TokenBuckets

__all__ = ["NodeReportLimiter", "instance_of"]

NODE_PREFIX = "/v1/nodes/"


def instance_of(path: str) -> str:
    """The instance id a node report's path names (``/v1/nodes/<id>/notice`` -> ``<id>``)."""
    return path[len(NODE_PREFIX):].split("/", 1)[0] if path.startswith(NODE_PREFIX) else ""


@dataclass(frozen=True)
class Refusal:
    """Which bucket refused a report (``instance`` or ``client``) and the seconds until it may."""

    limit: str
    retry_after_s: float


class NodeReportLimiter:
    """Token buckets per instance id and per client address for ``/v1/nodes/*``."""

    def __init__(self, limits: ApiLimits) -> None:
        self.limits = limits
        self.per_instance = TokenBuckets(limits.node_report_rate_per_s, limits.node_report_burst)
        self.per_client = TokenBuckets(limits.node_client_rate_per_s, limits.node_client_burst)

    def check(self, path: str, client: str | None, now: float | None = None) -> Refusal | None:
        """Take one token from the client's bucket, then the instance's: None when allowed."""
        wait = self.per_client.take(client or "unknown", now)
        if wait > 0:
            return Refusal("client", wait)
        wait = self.per_instance.take(instance_of(path), now)
        return Refusal("instance", wait) if wait > 0 else None

    def admit(self, path: str, client: str | None, now: float | None = None) -> None:
        """Raise :class:`RateLimited` (429, Retry-After) when either bucket is empty."""
        refused = self.check(path, client, now)
        if refused is None:
            return
        if refused.limit == "client":
            what = (f"more than {self.limits.node_client_burst} node reports at once from "
                    f"{client} ({self.limits.node_client_rate_per_s:g}/s after)")
        else:
            what = (f"more than {self.limits.node_report_burst} reports for instance "
                    f"{instance_of(path)} ({self.limits.node_report_rate_per_s:g}/s after)")
        raise NodeReportsLimited(what, refused)


class NodeReportsLimited(RateLimited):
    """A node report refused by :class:`NodeReportLimiter` (``limit``: which bucket)."""

    def __init__(self, message: str, refused: Refusal) -> None:
        super().__init__(message, retry_after_s=refused.retry_after_s,
                         fix="a node reports a notice or a failed boot a few times; retry after "
                             "the Retry-After seconds")
        self.limit = refused.limit
