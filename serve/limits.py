"""The API's limits (body size, request rate, requests and jobs in flight, bag size, list size)
and the per-tenant token bucket that enforces the request rate.

Limits are resolved once, in the process that starts the API (``SPOTPLANE_API_*`` settings),
and handed to the Serve replica, so every replica enforces the same numbers.
"""

from __future__ import annotations

import math
import threading
import time

from pydantic import BaseModel, Field

from controlplane.core.config import Settings
from controlplane.core.tokens import hash_token
from serve.fairness import tenant_budget

__all__ = ["ApiLimits", "TokenBuckets"]


class ApiLimits(BaseModel):
    """What one tenant may send and get back; the defaults keep `benchmarks.api` unthrottled."""

    max_body_bytes: int = Field(default=1 << 20, ge=1024, description="request body cap (413 above)")
    rate_per_s: float = Field(default=100.0, gt=0, description="requests per second per tenant")
    burst: int = Field(default=200, ge=1, description="requests a tenant may send at once")
    max_in_flight_per_tenant: int = Field(
        default=1, ge=1, le=tenant_budget(),
        description="requests of one tenant being answered at once on one replica (429 above)")
    in_flight_wait_s: float = Field(
        default=0.5, ge=0, le=30,
        description="how long a request over max_in_flight_per_tenant waits for a slot (then 429)")
    max_jobs_in_flight: int = Field(default=10_000, ge=1, description="unfinished jobs per tenant")
    max_bag_jobs: int = Field(default=1000, ge=1, le=10_000, description="parameter sets per bag")
    max_list_bytes: int = Field(default=4 << 20, ge=4096, description="bytes of one list response")
    idempotency_ttl_s: float = Field(default=24 * 3600.0, gt=0, description="how long an Idempotency-Key replays")
    max_package_bytes: int = Field(default=512 << 20, ge=1024,
                                   description="bytes of one uploaded code package (413 above)")
    metrics_token_hash: str | None = Field(default=None, description="SHA-256 of the /metrics token")
    node_report_rate_per_s: float = Field(default=0.1, gt=0,
                                          description="/v1/nodes/* reports per second per instance id")
    node_report_burst: int = Field(default=20, ge=1,
                                   description="/v1/nodes/* reports one instance id may send at once")
    node_client_rate_per_s: float = Field(default=5.0, gt=0,
                                          description="/v1/nodes/* reports per second per client address")
    node_client_burst: int = Field(default=100, ge=1,
                                   description="/v1/nodes/* reports one client address may send at once")

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> ApiLimits:
        """The limits configured by ``SPOTPLANE_API_*`` environment variables (else defaults)."""
        s = settings or Settings()
        return cls(
            max_body_bytes=s.api_max_body_bytes, rate_per_s=s.api_rate_per_s, burst=s.api_burst,
            max_in_flight_per_tenant=s.api_max_in_flight_per_tenant,
            in_flight_wait_s=s.api_in_flight_wait_s,
            max_jobs_in_flight=s.api_max_jobs_in_flight, max_bag_jobs=s.api_max_bag_jobs,
            max_list_bytes=s.api_max_list_bytes, idempotency_ttl_s=s.api_idempotency_ttl_s,
            metrics_token_hash=hash_token(s.metrics_token) if s.metrics_token else None,
            node_report_rate_per_s=s.api_node_report_rate_per_s,
            node_report_burst=s.api_node_report_burst,
            node_client_rate_per_s=s.api_node_client_rate_per_s,
            node_client_burst=s.api_node_client_burst,
        )


class TokenBuckets:
    """One token bucket per key: ``rate`` tokens a second up to ``burst``; thread-safe."""

    def __init__(self, rate: float, burst: int, max_keys: int = 100_000) -> None:
        self.rate, self.burst, self.max_keys = rate, float(burst), max_keys
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, key: str, now: float | None = None) -> float:
        """Take one token: 0.0 when allowed, else the seconds until one is there (Retry-After)."""
        t = time.monotonic() if now is None else now
        with self._lock:
            tokens, at = self._buckets.get(key, (self.burst, t))
            tokens = min(self.burst, tokens + (t - at) * self.rate)
            if tokens >= 1.0:
                if len(self._buckets) >= self.max_keys and key not in self._buckets:
                    self._buckets.clear()
                self._buckets[key] = (tokens - 1.0, t)
                return 0.0
            self._buckets[key] = (tokens, t)
            return (1.0 - tokens) / self.rate


def retry_after_header(seconds: float) -> str:
    """Retry-After in whole seconds (at least 1), as RFC 9110 asks."""
    return str(max(1, math.ceil(seconds)))
