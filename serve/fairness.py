"""Each tenant's share of one API replica: at most ``max_in_flight_per_tenant`` of its requests
in flight at once, and all tenants together fewer than the replica's ``max_ongoing_requests``.

The rate limit (``serve.limits.TokenBuckets``) bounds how often a tenant may ask; this bounds
how much of the replica it holds at one time, so one tenant's slow or heavy requests cannot
queue every other tenant's (and the admin's) behind them. A request over its tenant's bound
waits, first come first served and without a thread, up to ``in_flight_wait_s`` for one of the
tenant's own requests to end (so a page's few parallel fetches are served one after another),
then is answered 429 with ``Retry-After`` at the gate, before any handler runs. A tenant whose
waiter was refused so gets no queue until its Retry-After has passed: a flood keeps gaps in
which other tenants' requests run alone, where a queue would keep the replica busy for it.
The counts live on the replica's event loop, which the gate runs on.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import deque
from dataclasses import dataclass, field

from controlplane.core.errors import RateLimited

__all__ = ["ADMIN_RESERVE", "MAX_ONGOING_REQUESTS", "Held", "InFlight", "share_the_gil", "tenant_budget"]

MAX_ONGOING_REQUESTS = 64  # Serve's max_ongoing_requests of one API replica
ADMIN_RESERVE = 8  # of those, slots no tenant may take: the admin and /metrics always get in
RETRY_AFTER_S = 1.0  # a held request usually ends well within a second
GIL_SWITCH_S = 0.0005  # the replica's GIL switch interval (see share_the_gil)


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
        """Give the slot back to its tenant (or to the tenant's next waiter); idempotent."""
        if not self.done and self.owner is not None:
            self.owner.release(self.tenant)
        self.done = True


class InFlight:
    """Requests in flight per tenant on this replica, capped per tenant (a request over the cap
    waits up to ``wait_s`` for a slot, first come first served) and for all tenants."""

    def __init__(self, per_tenant: int, tenants_total: int | None = None,
                 wait_s: float = 0.5) -> None:
        self.per_tenant, self.wait_s = per_tenant, wait_s
        self.tenants_total = tenant_budget() if tenants_total is None else tenants_total
        self._counts: dict[str, int] = {}
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
        self._total = 0
        self._refused_until: dict[str, float] = {}  # tenant -> when it may queue again

    async def acquire(self, tenant: str | None) -> Held:
        """A slot for one request of ``tenant`` (None: the admin, never capped), waiting up to
        ``wait_s`` behind the tenant's own requests; else RateLimited."""
        if tenant is None:
            return Held(None, None)
        if self._counts.get(tenant, 0) < self.per_tenant and not self._waiting.get(tenant):
            if self._total >= self.tenants_total:
                raise _replica_full(self.tenants_total)
            self._counts[tenant] = self._counts.get(tenant, 0) + 1
            self._total += 1
            return Held(self, tenant)
        if time.monotonic() < self._refused_until.get(tenant, 0.0):
            raise _tenant_full(self.per_tenant, self.wait_s)  # refused lately: no queue
        return await self._wait(tenant)

    async def _wait(self, tenant: str) -> Held:
        """Queue for the next slot ``tenant``'s ending requests hand over; 429 after ``wait_s``."""
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._waiting.setdefault(tenant, deque())
        queue.append(turn)
        try:
            await asyncio.wait_for(asyncio.shield(turn), self.wait_s)
        except TimeoutError:
            if not turn.done():  # done: handed over at the deadline, the slot is ours
                turn.cancel()
                self._forget(tenant, turn)
                self._refuse(tenant)
                raise _tenant_full(self.per_tenant, self.wait_s) from None
        except BaseException:  # cancelled: the client went away while it waited
            if turn.done() and not turn.cancelled():
                self.release(tenant)  # handed over just before: pass it on
            else:
                turn.cancel()
                self._forget(tenant, turn)
            raise
        return Held(self, tenant)

    def _refuse(self, tenant: str) -> None:
        """No queue for ``tenant`` until its Retry-After has passed."""
        if len(self._refused_until) > 100_000:
            self._refused_until.clear()
        self._refused_until[tenant] = time.monotonic() + RETRY_AFTER_S

    def _forget(self, tenant: str, turn: asyncio.Future[None]) -> None:
        queue = self._waiting.get(tenant)
        if queue is None:
            return
        if turn in queue:
            queue.remove(turn)
        if not queue:
            del self._waiting[tenant]

    def release(self, tenant: str | None) -> None:
        """One request of ``tenant`` has ended: its slot goes to the tenant's first waiter, else
        back to the counts."""
        if tenant is None:
            return
        queue = self._waiting.get(tenant)
        while queue:
            turn = queue.popleft()
            if not turn.done():
                turn.set_result(None)  # the slot changes hands: the counts stay
                if not queue:
                    del self._waiting[tenant]
                return
        self._waiting.pop(tenant, None)
        left = self._counts.get(tenant, 0) - 1
        if left > 0:
            self._counts[tenant] = left
        else:
            self._counts.pop(tenant, None)
        self._total = max(0, self._total - 1)

    def count(self, tenant: str) -> int:
        """How many of ``tenant``'s requests are in flight now."""
        return self._counts.get(tenant, 0)

    def waiting(self, tenant: str) -> int:
        """How many of ``tenant``'s requests wait for a slot now."""
        return len(self._waiting.get(tenant, ()))


def share_the_gil(interval_s: float = GIL_SWITCH_S) -> None:
    """Hand the GIL between threads every ``interval_s`` (CPython's default: 5 ms), so a short
    request's handler and the event loop do not wait 5 ms per handoff behind a long one."""
    sys.setswitchinterval(interval_s)


def _tenant_full(limit: int, wait_s: float) -> RateLimited:
    return RateLimited(
        f"max_in_flight_per_tenant: this tenant already has {limit} requests in flight on this "
        f"API replica and none ended within {wait_s:g} s (max_in_flight_per_tenant = {limit})",
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
