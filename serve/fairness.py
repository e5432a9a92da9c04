"""Each tenant's share of one API replica: at most ``max_in_flight_per_tenant`` of its requests
in flight at once, and all tenants together fewer than the replica's ``max_ongoing_requests``.

The rate limit (``serve.limits.TokenBuckets``) bounds how often a tenant may ask; this bounds
how much of the replica it holds at one time, so one tenant's slow or heavy requests cannot
queue every other tenant's (and the admin's) behind them. A request past either bound is
answered 429 with ``Retry-After`` at the gate, before any handler runs.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from controlplane.core.errors import RateLimited

__all__ = ["ADMIN_RESERVE", "MAX_ONGOING_REQUESTS", "InFlight", "Held", "tenant_budget"]

MAX_ONGOING_REQUESTS = 64  # Serve's max_ongoing_requests of one API replica
ADMIN_RESERVE = 8  # of those, slots no tenant may take: the admin and /metrics always get in
RETRY_AFTER_S = 1.0  # a held request usually ends well within a second


def tenant_budget(max_ongoing: int = MAX_ONGOING_REQUESTS, reserve: int = ADMIN_RESERVE) -> int:
    """The replica's slots all tenants together may hold: its ongoing cap less the admin's reserve."""
    return max(1, max_ongoing - reserve)


@dataclass
class Held:
    """One admitted request's slot; ``release`` gives it back (once)."""

    owner: InFlight | None
    tenant: str | None
    done: bool = field(default=False)

    def release(self) -> None:
        """Give the slot back to its tenant's count (idempotent)."""
        if not self.done and self.owner is not None:
            self.owner.release(self.tenant)
        self.done = True


class InFlight:
    """Requests in flight per tenant on this replica, capped per tenant and for all tenants."""

    def __init__(self, per_tenant: int, tenants_total: int | None = None) -> None:
        self.per_tenant = per_tenant
        self.tenants_total = tenant_budget() if tenants_total is None else tenants_total
        self._counts: dict[str, int] = {}
        self._total = 0
        self._lock = threading.Lock()

    def acquire(self, tenant: str | None) -> Held:
        """A slot for one request of ``tenant`` (None: the admin, never capped), else RateLimited."""
        if tenant is None:
            return Held(None, None)
        with self._lock:
            mine = self._counts.get(tenant, 0)
            if mine >= self.per_tenant:
                raise _tenant_full(self.per_tenant)
            if self._total >= self.tenants_total:
                raise _replica_full(self.tenants_total)
            self._counts[tenant] = mine + 1
            self._total += 1
        return Held(self, tenant)

    def release(self, tenant: str | None) -> None:
        """One request of ``tenant`` has ended."""
        if tenant is None:
            return
        with self._lock:
            left = self._counts.get(tenant, 0) - 1
            if left > 0:
                self._counts[tenant] = left
            else:
                self._counts.pop(tenant, None)
            self._total = max(0, self._total - 1)

    def count(self, tenant: str) -> int:
        """How many of ``tenant``'s requests are in flight now."""
        with self._lock:
            return self._counts.get(tenant, 0)


def _tenant_full(limit: int) -> RateLimited:
    return RateLimited(
        f"max_in_flight_per_tenant: this tenant already has {limit} requests in flight on this "
        f"API replica (max_in_flight_per_tenant = {limit})",
        retry_after_s=RETRY_AFTER_S,
        fix=f"send at most {limit} requests at once (wait for an answer before the next) and "
            "retry after the Retry-After seconds; the operator sets "
            "SPOTPLANE_API_MAX_IN_FLIGHT_PER_TENANT")


def _replica_full(limit: int) -> RateLimited:
    return RateLimited(
        f"tenants_in_flight: all tenants together already have {limit} requests in flight on "
        f"this API replica (its max_ongoing_requests less {ADMIN_RESERVE} kept for the admin)",
        retry_after_s=RETRY_AFTER_S,
        fix="retry after the Retry-After seconds, or ask the operator for more API replicas "
            "(spotplane up --api-replicas N)")
