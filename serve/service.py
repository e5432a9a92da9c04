"""The service layer between the HTTP handlers and the store: who may do what, and checks the
pydantic models cannot make alone (the tenant's GPU limit, a known accelerator).

Handlers never touch SQLite: they call :class:`ControlPlaneService`, which scopes every read and
write to the calling :class:`Principal`. A tenant asking for another tenant's job gets the same
:class:`~controlplane.core.errors.NotFound` as for a job that does not exist (404, not 403); admin-only
views raise :class:`Forbidden`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from clusters.clusterlogs import attempt_logs_across
from clusters.packages import PackageStore, package_name
from clusters.rayjobs import LogArchive, attempt_logs, submission_client
from controlplane.core.bills import Bill, job_bill
from controlplane.core.clock import Clock, WallClock
from controlplane.core.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    RateLimited,
    Unauthorized,
    UnknownReference,
)
from controlplane.core.models import (
    Bag,
    BagSpec,
    Decision,
    Event,
    Job,
    JobKind,
    JobSpec,
    JobState,
    Node,
    Tenant,
    TenantBudget,
    TenantShare,
    TenantShareSpec,
    TenantSpec,
)
from controlplane.core.nodecreds import credential_matches, report_secret
from controlplane.core.readmodels import CapacityPoint, CostSummary, ForecastRow, Quota, ZoneInfo
from controlplane.core.tokens import hash_token
from controlplane.core.units import DB_FILE, HOUR
from controlplane.reconcile.fairshare import META_KEY as FAIR_SHARE_KEY
from controlplane.reconcile.fairshare import read_lines
from controlplane.reconcile.policyhost import live_policies
from controlplane.store import IDEMPOTENCY_TTL_S, IdempotentCall, Store, StoredAnswer, is_postgres
from policies.budgets import Estimate, deadline_estimate, headroom, level, month_of
from serve.metrics import ApiMetrics, build_registry, exposition
from serve.schemas import SpendView, TenantMe

log = logging.getLogger(__name__)
S = TypeVar("S", bound=BaseModel)  # a request body (JobSpec, BagSpec)


_TOKEN_CACHE_MAX = 10_000
_CATALOG_TTL_S = 10.0  # wall seconds an accelerator list is reused (a cache, not control-plane time)


@dataclass(frozen=True, slots=True)
class Caps:
    """Per-tenant caps on submissions (the API's limits; generous by default)."""

    max_jobs_in_flight: int = 10_000
    max_bag_jobs: int = 1000
    in_flight_retry_s: float = 60.0
    idempotency_ttl_s: float = IDEMPOTENCY_TTL_S  # an Idempotency-Key's answer is kept this long


Render = Callable[[Bag | None, Sequence[Job]], str]


def fingerprint(route: str, tenant_id: str, body: dict[str, Any]) -> str:
    """A digest of one submission, to tell a retry from another request under the same key."""
    text = json.dumps({"route": route, "tenant": tenant_id, "body": body}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def db_path(state_dir: str | Path) -> Path:
    """Where the SQLite store of a state directory lives."""
    return Path(state_dir) / DB_FILE


@dataclass(frozen=True, slots=True)
class Workload:
    """The workload Ray cluster jobs run on, as the API reads their logs from it."""

    address: str
    token_path: str | None = None
    archive: LogArchive | None = None  # the executor's copies of attempts on lost nodes


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the admin (``tenant_id`` None) or one tenant."""

    tenant_id: str | None
    is_admin: bool = False

    @classmethod
    def admin(cls) -> Principal:
        return cls(tenant_id=None, is_admin=True)

    @classmethod
    def tenant(cls, tenant_id: str) -> Principal:
        return cls(tenant_id=tenant_id, is_admin=False)

    @property
    def scope(self) -> str | None:
        """The tenant id every query is restricted to (None for the admin: everything)."""
        return None if self.is_admin else self.tenant_id


class ControlPlaneService:
    """Every operation of the API, checked and scoped to a principal."""

    def __init__(self, store: Store, admin_token_hash: str, caps: Caps | None = None,
                 clock: Clock | None = None, packages: PackageStore | None = None,
                 workload: Workload | None = None, per_thread: bool = False) -> None:
        self._store = store
        self._local = threading.local() if per_thread else None
        self.packages = packages
        self.workload = workload
        self._workload_client: Any = None
        self._cluster_clients: dict[str, Any] = {}  # dashboard URL -> that cluster's job client
        self.caps = caps or Caps()
        self.clock = clock or WallClock()  # wall time: when Idempotency-Keys expire
        self._admin_hash = admin_token_hash
        self._tokens: dict[str, Tenant] = {}  # token hash -> tenant (tokens never change)
        self._lock = threading.Lock()
        self._accelerators: tuple[float, set[str]] = (0.0, set())
        self._registry: CollectorRegistry | None = None  # built at the first scrape

    @classmethod
    def open(cls, path: str | Path, admin_token_hash: str, caps: Caps | None = None,
             packages: PackageStore | None = None, workload: Workload | None = None) -> ControlPlaneService:
        """A service on the store at ``path``: one connection per thread that calls it."""
        return cls(Store(path), admin_token_hash, caps, packages=packages, workload=workload,
                   per_thread=str(path) != ":memory:" and not is_postgres(path))

    @property
    def base_store(self) -> Store:
        """The store handle the service was opened with (shared by every thread)."""
        return self._store

    @property
    def store(self) -> Store:
        """The calling thread's connection (``per_thread``), else the one given.

        The API's handlers run in a threadpool; SQLite in WAL mode reads concurrently on
        separate connections, so a long list does not hold up a cheap request behind one lock.
        A PostgreSQL store is shared: its connection pool serves the threads.
        """
        if self._local is None:
            return self._store
        mine: Store | None = getattr(self._local, "store", None)
        if mine is None:
            mine = Store(self._store.url, create=False)  # no write: a held write lock must not stall it
            mine.tx_seconds = self._store.tx_seconds  # one write histogram for the replica
            self._local.store = mine
        return mine

    # -- authentication ------------------------------------------------------------------------
    def known(self, token: str | None) -> Principal | None:
        """The principal of the admin token or of a token seen before (no store call), else None."""
        if not token:
            return None
        digest = hash_token(token)
        if hmac.compare_digest(digest.encode(), self._admin_hash.encode()):
            return Principal.admin()
        tenant = self._tokens.get(digest)
        return None if tenant is None else Principal.tenant(tenant.id)

    def authenticate(self, token: str | None) -> Principal:
        """The principal holding ``token``; :class:`Unauthorized` when it is missing or unknown."""
        if not token:
            raise Unauthorized(
                "missing bearer token", fix="send `Authorization: Bearer <token>` (tenant or admin)"
            )
        digest = hash_token(token)
        if hmac.compare_digest(digest.encode(), self._admin_hash.encode()):
            return Principal.admin()
        tenant = self._tokens.get(digest)
        if tenant is None:
            tenant = self.store.tenant_by_token(token)
            if tenant is None:
                raise Unauthorized("unknown token", fix="use the token printed when the tenant was created")
            with self._lock:
                if len(self._tokens) >= _TOKEN_CACHE_MAX:
                    self._tokens.clear()
                self._tokens[digest] = tenant
        return Principal.tenant(tenant.id)

    @staticmethod
    def require_admin(principal: Principal, what: str) -> None:
        if not principal.is_admin:
            raise Forbidden(f"{what} needs the admin token", fix="use the admin token in the file `spotplane up` names (STATE/admin-token)")

    @staticmethod
    def require_tenant(principal: Principal, what: str) -> str:
        """The caller's tenant id; :class:`Forbidden` for the admin, who is no tenant."""
        if principal.tenant_id is None:
            raise Forbidden(f"{what} needs a tenant's token; the admin is no tenant",
                            fix="use the token printed when the tenant was created")
        return principal.tenant_id

    # -- tenants -------------------------------------------------------------------------------
    def create_tenant(self, principal: Principal, spec: TenantSpec) -> tuple[Tenant, str]:
        self.require_admin(principal, "creating a tenant")
        return self.store.create_tenant(spec)

    def list_tenants(self, principal: Principal, *, after: str | None = None,
                     limit: int | None = None) -> list[Tenant]:
        """Every tenant (the admin) or just the caller; with ``after`` / ``limit`` one page."""
        if principal.is_admin:
            return self.store.list_tenants(after=after, limit=limit)
        me = self.me(principal)
        if after is not None and after != me.id:
            raise UnknownReference("after", f"{after!r} is not an id of this list",
                               fix="pass the X-Spotplane-Next-After of the previous page, or "
                                   "leave after out for the first page")
        return [] if after is not None or limit == 0 else [me]

    def me(self, principal: Principal) -> Tenant:
        return self.store.get_tenant(self.require_tenant(principal, "/v1/tenants/me"))

    # -- jobs ----------------------------------------------------------------------------------
    def _submitter(self, principal: Principal, tenant_id: str | None) -> Tenant:
        """The tenant a submission is for: the caller, or ``tenant_id`` when the admin submits."""
        if principal.is_admin:
            if tenant_id is None:
                raise Forbidden(
                    "tenant_id: the admin is no tenant and must say which tenant submits",
                    fix="add ?tenant_id=<id> (CLI: --tenant <id>), or use the tenant's token")
            return self.store.get_tenant(tenant_id)
        assert principal.tenant_id is not None
        return self.store.get_tenant(principal.tenant_id)

    def _check_spec(self, tenant: Tenant, spec: JobSpec, field_prefix: str = "") -> None:
        """What only the service can check, against the tenant and the fleet: the tenant's GPU
        limit (403, as a quota), a known policy, accelerator and uploaded packages (404)."""
        if spec.gpus > tenant.max_gpus:
            raise Forbidden(
                f"{field_prefix}gpus_per_worker: the job needs {spec.gpus} GPUs (gpus_per_worker "
                f"{spec.gpus_per_worker} x workers {spec.workers}) but tenant {tenant.name} may "
                f"use at most {tenant.max_gpus}",
                fix="use fewer workers or GPUs per worker, or ask the admin to raise max_gpus",
            )
        if spec.policy is not None and spec.policy not in live_policies():
            raise UnknownReference(
                f"{field_prefix}policy", f"unknown deadline policy {spec.policy!r}",
                fix=f"use one of {', '.join(live_policies())}, or leave it null for the default")
        if spec.runtime_env is not None:
            self._check_packages(tenant, spec, field_prefix)
        if spec.accelerator is not None:
            known = self.accelerators()
            if known and spec.accelerator not in known:
                raise UnknownReference(
                    f"{field_prefix}accelerator",
                    f"unknown accelerator {spec.accelerator!r}",
                    fix=f"use one of {', '.join(sorted(known))}, or leave it null for any",
                )

    def _check_packages(self, tenant: Tenant, spec: JobSpec, field_prefix: str) -> None:
        """Every uploaded package the job's runtime_env names is the tenant's own."""
        assert spec.runtime_env is not None
        renv = spec.runtime_env
        fields = [("working_dir", renv.working_dir)] + [
            (f"py_modules[{i}]", u) for i, u in enumerate(renv.py_modules or [])]
        for name, uri in fields:
            if uri is None or not uri.startswith("gcs://"):
                continue
            if self.packages is None or not self.packages.exists(tenant.id, package_name(uri)):
                raise UnknownReference(
                    f"{field_prefix}runtime_env.{name}", f"package {uri} was not uploaded by "
                    f"tenant {tenant.name}",
                    fix="upload it first: `spotplane submit --working-dir DIR` (or PUT "
                        "/v1/packages/<name>, or `ray job submit --working-dir DIR`)")

    # -- packages ------------------------------------------------------------------------------
    def package_store(self, principal: Principal) -> tuple[PackageStore, str]:
        if self.packages is None:
            raise NotFound("this API stores no packages", fix="start it with a package directory")
        return self.packages, self.require_tenant(principal, "a package")

    def package_exists(self, principal: Principal, name: str) -> bool:
        """Whether the caller's tenant has uploaded the package ``name``."""
        store, tenant = self.package_store(principal)
        return store.exists(tenant, name)

    def put_package(self, principal: Principal, name: str, data: bytes) -> bool:
        """Store one of the caller's packages; False when it was already there."""
        store, tenant = self.package_store(principal)
        return store.put(tenant, name, data)

    # -- logs ----------------------------------------------------------------------------------
    def job_logs(self, principal: Principal, job_id: str) -> str:
        """Every attempt's logs of the caller's job from the workload cluster, oldest first,
        each after a marker line ('' before its first attempt started)."""
        return "".join(f"{m}\n{t}" for m, t in self.job_log_parts(principal, job_id))

    def job_log_parts(self, principal: Principal, job_id: str) -> list[tuple[str, str]]:
        """(marker line, text) of each attempt of the caller's job, oldest first."""
        self.get_job(principal, job_id)  # 404 for another tenant's job
        if self.workload is None:
            return []
        clusters = self.store.list_clusters()
        if len(clusters) > 1:  # a job may have run on several: each one's attempts
            return attempt_logs_across([self._cluster_client(c.dashboard_url, c.token_ref)
                                        for c in clusters], job_id, self.workload.archive)
        if self._workload_client is None:
            self._workload_client = submission_client(self.workload.address,
                                                      self.workload.token_path, remote=True)
        return attempt_logs(self._workload_client, job_id, self.workload.archive)

    def _cluster_client(self, dashboard_url: str, token_ref: str | None) -> Any:
        """A job client of one workload cluster, made once per address."""
        clients = self._cluster_clients
        if dashboard_url not in clients:
            token = token_ref if token_ref and Path(token_ref).is_file() else None
            clients[dashboard_url] = submission_client(dashboard_url, token, remote=True)
        return clients[dashboard_url]

    def accelerators(self) -> set[str]:
        """GPU models the fleet sells (empty before the controller's first catalog); cached 10 s."""
        at, known = self._accelerators
        if not known or time.monotonic() - at > _CATALOG_TTL_S:
            known = {z.accelerator for z in self.store.zones() if z.accelerator}
            self._accelerators = (time.monotonic(), known)
        return known

    def submit_job(self, principal: Principal, spec: JobSpec, tenant_id: str | None = None) -> Job:
        tenant = self._submitter(principal, tenant_id)
        self._check_job(tenant, spec)
        return self.store.submit_job(tenant.id, spec)

    def _check_job(self, tenant: Tenant, spec: JobSpec) -> None:
        """What one job must pass before it is stored: limits, its bag, the in-flight cap."""
        self._check_spec(tenant, spec)
        self._check_cost(tenant, spec)
        if spec.bag_id is not None:
            self.store.get_bag(spec.bag_id, tenant.id)
        self._check_in_flight(tenant, 1)

    def submit_job_once(self, principal: Principal, spec: JobSpec, key: str, render: Render,
                        tenant_id: str | None = None) -> StoredAnswer:
        """Submit under an Idempotency-Key: the first call creates the job, a retry gets its answer."""
        tenant = self._submitter(principal, tenant_id)
        return self._once(tenant, "jobs", spec, key, render, self._check_job,
                          lambda call: self.store.submit_jobs_once(tenant.id, [spec], call))

    def _once(self, tenant: Tenant, what: str, spec: S, key: str, render: Render,
              check: Callable[[Tenant, S], None],
              create: Callable[[IdempotentCall], StoredAnswer]) -> StoredAnswer:
        """One create under an Idempotency-Key: a retry replays the first answer, a new key is
        checked and created in the transaction that records its answer."""
        call = IdempotentCall(key, fingerprint(what, tenant.id, spec.model_dump(mode="json")), render,
                              at=self.clock.now(), ttl_s=self.caps.idempotency_ttl_s)
        earlier = self._replay(tenant.id, call)
        if earlier is not None:
            return earlier
        check(tenant, spec)
        return self._same_request(create(call), call)

    def _replay(self, tenant_id: str, call: IdempotentCall) -> StoredAnswer | None:
        earlier = self.store.idempotent_answer(tenant_id, call.key, call.not_before)
        return None if earlier is None else self._same_request(earlier, call)

    @staticmethod
    def _same_request(answer: StoredAnswer, call: IdempotentCall) -> StoredAnswer:
        if answer.fingerprint != call.fingerprint:
            raise Conflict(
                f"Idempotency-Key: key {call.key!r} was already used for a different request",
                fix="send a new key for a new request; reuse a key only to retry the same body")
        return answer

    def _check_in_flight(self, tenant: Tenant, adding: int) -> None:
        """Refuse (429) a submission that would leave more than the cap of unfinished jobs."""
        cap = self.caps.max_jobs_in_flight
        in_flight = self.store.jobs_in_flight(tenant.id)
        if in_flight + adding > cap:
            raise RateLimited(
                f"tenant {tenant.name} has {in_flight} unfinished jobs; {adding} more would pass "
                f"the cap of {cap}", retry_after_s=self.caps.in_flight_retry_s,
                fix="wait for jobs to finish (or cancel some), then retry")

    def list_jobs(
        self,
        principal: Principal,
        *,
        state: Iterable[JobState] | None = None,
        kind: JobKind | None = None,
        bag_id: str | None = None,
        tenant_id: str | None = None,
        limit: int = 1000,
        offset: int = 0,
        max_bytes: int | None = None,
        after: str | None = None,
    ) -> list[Job]:
        """The caller's jobs (``tenant_id``'s or every tenant's for the admin), oldest first;
        past the job ``after`` when given, then past ``offset`` more."""
        scope = principal.scope
        if principal.is_admin:
            scope = tenant_id
        elif tenant_id is not None and tenant_id != principal.tenant_id:
            return []  # another tenant's jobs do not exist for this caller
        states = list(state) if state else None
        return self.store.list_jobs(
            scope, state=states, kind=kind, bag_id=bag_id, limit=limit, offset=offset,
            max_bytes=max_bytes, after=after,
        )

    def job_page(self, principal: Principal, *, states: list[JobState] | None = None,
                 kind: JobKind | None = None, tenant_id: str | None = None, text: str | None = None,
                 order_by: str = "seq", descending: bool = False, limit: int = 50,
                 offset: int = 0, after: str | None = None) -> tuple[int, list[Job]]:
        """One sorted, filtered page of the caller's jobs (any tenant's for the admin) and the total."""
        if principal.is_admin:
            scope = tenant_id
        elif tenant_id is not None and tenant_id != principal.tenant_id:
            return 0, []
        else:
            scope = principal.tenant_id
        return self.store.job_page(scope, states=[s.value for s in states] if states else None,
                                   kind=kind, text=text, order_by=order_by, descending=descending,
                                   now=self.store.control_time(), limit=limit, offset=offset,
                                   after=after)

    def job_counts(self, principal: Principal) -> dict[str, int]:
        """The caller's jobs per state (every tenant's for the admin)."""
        return self.store.job_counts(principal.scope)

    def recent_preemptions(self, principal: Principal, limit: int = 50) -> list[Event]:
        """The newest preemptions of the caller's jobs (every tenant's for the admin)."""
        return self.store.recent_events(principal.scope, kind="transition",
                                        dst=JobState.PREEMPTED.value, limit=limit)

    def get_job(self, principal: Principal, job_id: str) -> Job:
        return self.store.get_job(job_id, principal.scope)

    def cancel_job(self, principal: Principal, job_id: str) -> Job:
        return self.store.request_cancel(job_id, principal.scope)

    def job_events(self, principal: Principal, job_id: str, *, after: str | None = None,
                   limit: int | None = None) -> list[Event]:
        return self.store.job_events(job_id, principal.scope, after=after, limit=limit)

    def job_nodes(self, principal: Principal, job_id: str) -> list[Node]:
        """The nodes the caller's job held: those its events name, and those tagged with it."""
        job = self.get_job(principal, job_id)
        named = {e.node_id for e in self.job_events(principal, job_id) if e.node_id}
        return self.store.job_nodes(job_id, named | set(job.node_ids))

    def job_decisions(self, principal: Principal, job_id: str, *, after: str | None = None,
                      limit: int = 100_000) -> list[Decision]:
        return self.store.job_decisions(job_id, principal.scope, after=after, limit=limit)

    # -- bags ----------------------------------------------------------------------------------
    def submit_bag(
        self, principal: Principal, spec: BagSpec, tenant_id: str | None = None
    ) -> tuple[Bag, list[Job]]:
        tenant = self._submitter(principal, tenant_id)
        self._check_bag(tenant, spec)
        return self.store.create_bag(tenant.id, spec)

    def submit_bag_once(self, principal: Principal, spec: BagSpec, key: str, render: Render,
                        tenant_id: str | None = None) -> StoredAnswer:
        """:meth:`submit_bag` under an Idempotency-Key (see :meth:`submit_job_once`)."""
        tenant = self._submitter(principal, tenant_id)
        return self._once(tenant, "bags", spec, key, render, self._check_bag,
                          lambda call: self.store.create_bag_once(tenant.id, spec, call))

    def _check_bag(self, tenant: Tenant, spec: BagSpec) -> None:
        if len(spec.params) > self.caps.max_bag_jobs:  # this API's cap (a setting): a quota
            raise Forbidden(
                f"params: {len(spec.params)} parameter sets is more than this API's bag cap of "
                f"{self.caps.max_bag_jobs}", fix="split the sweep into several bags")
        self._check_spec(tenant, spec.template, "template.")
        self._check_cost(tenant, spec.template, "template.")
        self._check_in_flight(tenant, len(spec.params))

    def list_bags(self, principal: Principal, *, after: str | None = None,
                  limit: int | None = None) -> list[Bag]:
        return self.store.list_bags(principal.scope, after=after, limit=limit)

    def get_bag(self, principal: Principal, bag_id: str) -> Bag:
        return self.store.get_bag(bag_id, principal.scope)

    # -- fleet ---------------------------------------------------------------------------------
    def nodes(self, principal: Principal, *, live_only: bool = False, after: str | None = None,
              limit: int | None = None) -> list[Node]:
        """Fleet-wide for the admin; a tenant sees only the nodes running its jobs."""
        return self.store.node_page(tenant_id=principal.scope, live_only=live_only, after=after,
                                    limit=limit)

    def zones(self) -> list[ZoneInfo]:
        return self.store.zones()

    # -- quotas, forecasts, cost ---------------------------------------------------------------
    def quotas(self) -> list[Quota]:
        return self.store.quotas()

    def forecasts(self, principal: Principal) -> list[ForecastRow]:
        return self.store.forecasts(principal.scope)

    def capacity_history(self, principal: Principal, *, accelerator: str | None,
                         after: int | None, limit: int) -> list[CapacityPoint]:
        """Every pool's capacity points; a tenant's come without the HP demand (it sums every
        tenant's forecast), the rest (capacity, quota, H, eta) is pool-wide like ``/v1/quotas``."""
        points = self.store.capacity_history(accelerator=accelerator, after=after, limit=limit)
        if principal.is_admin:
            return points
        return [p.model_copy(update={"hp_demand_gpus": None, "hp_demand_upper_gpus": None})
                for p in points]

    def cost(self, principal: Principal) -> list[CostSummary]:
        return self.store.cost_by_tenant(principal.scope)

    def idle_cost(self, principal: Principal) -> tuple[float, float]:
        """Idle nodes' cost and, of it, hot spares' (the admin's; a tenant's is none)."""
        if not principal.is_admin:
            return (0.0, 0.0)
        m = self.store.metrics()
        return (m.get("idle_cost_dollars", 0.0), m.get("spare_idle_cost_dollars", 0.0))

    # -- health and metrics --------------------------------------------------------------------
    def control_time(self) -> float:
        return self.store.control_time()

    def metrics(self) -> dict[str, float]:
        return self.store.metrics()

    def metrics_text(self, api: ApiMetrics | None = None) -> bytes:
        """Every family in Prometheus text format (operator-only: spend by tenant)."""
        if self._registry is None:
            self._registry = build_registry(self.store, api)
        return exposition(self._registry)

    def health(self) -> dict[str, Any]:
        """Cheap liveness: the store answers and the controller's clock is known."""
        return {"status": "ok", "control_time": self.store.control_time()}

    # -- budgets and bills ---------------------------------------------------------------------
    def _check_cost(self, tenant: Tenant, spec: JobSpec, field_prefix: str = "") -> None:
        """A deadline job whose cheapest plan (:func:`policies.budgets.deadline_estimate`) costs
        more than its max_cost or its tenant's monthly headroom is refused (422); a bag's
        template is checked as one of its jobs."""
        if spec.kind is not JobKind.DEADLINE:
            return
        budget = self.store.budget(tenant.id)
        if spec.max_cost is None and budget.monthly_budget is None:
            return
        est = self._plan_estimate(spec)
        if est is None:
            return
        plan = f"${est.dollars:.2f} ({est.basis.replace('_', ' ')} plan)"
        if spec.max_cost is not None and est.dollars > spec.max_cost + 1e-9:
            raise InvalidInput(
                f"{field_prefix}max_cost", f"the job's cheapest plan is estimated at {plan}, over its max_cost "
                f"of ${spec.max_cost:.2f}",
                fix=f"raise max_cost to at least {est.dollars:.2f}, lower compute_hours or "
                    "workers, or give a later deadline")
        view = self.spend_view(tenant.id)
        if view.monthly_headroom is not None and est.dollars > view.monthly_headroom + 1e-9:
            raise InvalidInput(
                f"{field_prefix}compute_hours", f"the job's cheapest plan is estimated at {plan}, over tenant "
                f"{tenant.name}'s monthly headroom of ${view.monthly_headroom:.2f} (budget "
                f"${view.monthly_budget:.2f}, spent ${view.month_spend:.2f})",
                fix="lower compute_hours or workers, wait for next month, or ask the admin to "
                    "raise monthly_budget")

    def _plan_estimate(self, spec: JobSpec) -> Estimate | None:
        """The cheapest plan over the fleet's zones that fit the job (None: no zone known)."""
        acc = spec.accelerator
        zones = [z for z in self.store.zones() if (acc is None or z.accelerator.lower() == acc.lower())
                 and z.accelerator_count >= spec.gpus_per_worker]
        if not zones:
            return None
        if spec.deadline_hours is not None:
            deadline_hours = spec.deadline_hours
        else:
            deadline_hours = ((spec.deadline or 0.0) - self.store.control_time()) / HOUR
        spot = min((z.spot_price for z in zones if z.spot_price > 0), default=None)
        return deadline_estimate(spec.compute_hours, spec.overhead_hours, deadline_hours,
                                 spec.workers * spec.replicas, spot,
                                 min(z.on_demand_price for z in zones))

    def spend_view(self, tenant_id: str, spends: tuple[dict[str, float], dict[str, float]] | None = None
                   ) -> SpendView:
        """The tenant's spend, limits and headroom this month (``spends``: every tenant's month
        spend and spend rate, read once for a list of views)."""
        budget = self.store.budget(tenant_id)
        month = month_of(self.store.control_time())
        month_spend, rates = spends if spends is not None else self._spends()
        spent = month_spend.get(tenant_id, 0.0)
        rate = rates.get(tenant_id, 0.0)
        soft = budget.soft_fraction
        return SpendView(
            tenant_id=tenant_id, month=month, month_spend=spent,
            monthly_budget=budget.monthly_budget,
            monthly_headroom=headroom(spent, budget.monthly_budget),
            monthly_level=level(spent, budget.monthly_budget, soft).value, spend_rate=rate,
            hourly_cap=budget.hourly_cap, hourly_headroom=headroom(rate, budget.hourly_cap),
            hourly_level=level(rate, budget.hourly_cap, soft).value, soft_fraction=soft,
            protected=budget.protected)

    def _spends(self) -> tuple[dict[str, float], dict[str, float]]:
        """Every tenant's spend this month and spend rate now."""
        return (self.store.month_spend(month_of(self.store.control_time())),
                self.store.spend_rates())

    def me_with_spend(self, principal: Principal) -> TenantMe:
        """The calling tenant with its spend and headroom."""
        tenant = self.me(principal)
        return TenantMe(**tenant.model_dump(), token_hash=tenant.token_hash,
                        spend=self.spend_view(tenant.id))

    def set_budget(self, principal: Principal, tenant_id: str, budget: TenantBudget) -> SpendView:
        """Admin only: set a tenant's spend limits; the controller applies them within ten ticks."""
        self.require_admin(principal, "setting a tenant's budget")
        tenant = self.store.get_tenant(tenant_id)
        self.store.set_budget(tenant.id, budget)
        return self.spend_view(tenant.id)

    def budget_view(self, principal: Principal, tenant_id: str) -> SpendView:
        """A tenant's spend and limits: any for the admin, only its own for a tenant."""
        tenant = self.store.get_tenant(tenant_id)
        if not principal.is_admin and principal.tenant_id != tenant.id:
            raise NotFound(f"tenant {tenant_id} not found")
        return self.spend_view(tenant.id)

    def budgets(self, principal: Principal) -> list[SpendView]:
        """Every tenant's spend view (admin), or the caller's own."""
        if principal.is_admin:
            spends = self._spends()  # one scan of the counters and the nodes for every tenant
            return [self.spend_view(t.id, spends) for t in self.store.list_tenants()]
        return [self.spend_view(self.require_tenant(principal, "/v1/budgets"))]

    def job_bills(self, principal: Principal, *, month: str | None = None) -> list[Bill]:
        """Every job's bill in the caller's scope (one month's when given), oldest first."""
        out: list[Bill] = []
        after: str | None = None
        while True:
            page = self.store.list_jobs(principal.scope, limit=1000, after=after)
            for job in page:
                m = month_of(job.submitted_at)
                if month is None or m == month:
                    out.append(job_bill(job, m))
            if len(page) < 1000:
                return out
            after = page[-1].id

    def job_bill(self, principal: Principal, job_id: str) -> Bill:
        """One of the caller's jobs' bill (404 for another tenant's)."""
        job = self.get_job(principal, job_id)
        return job_bill(job, month_of(job.submitted_at))
    # -- a launched node's own reports -----------------------------------------------------------
    def node_report(self, instance_id: str, credential: str | None, kind: str,
                    body: dict[str, Any]) -> None:
        """Keep a node's report (a notice, a failed boot) for the controller, once its
        credential proves it is of the launch that made ``instance_id``
        (``controlplane.core.nodecreds``); an instance no live node holds is 404, any other
        node's credential is refused (403)."""
        if not credential:
            raise Unauthorized("missing node credential",
                               fix="send `Authorization: Bearer <the node's report credential>`")
        node = self.store.node_by_instance(instance_id)
        if node is None:
            raise NotFound(f"no live node holds instance {instance_id}",
                           fix="a node reports for its own instance while the fleet holds it")
        secret = report_secret(self._admin_hash)
        if not credential_matches(secret, node.intent_id, credential):
            raise Forbidden(f"this credential may not report for {instance_id}",
                            fix="a node reports for its own instance, with its own credential")
        self.store.put_node_report(instance_id, kind, body)

    # -- fair share ----------------------------------------------------------------------------
    def set_fair_share(self, principal: Principal, tenant: str,
                       spec: TenantShareSpec) -> TenantShare:
        """Admin: a tenant's fair-share weight and nominal GPUs per pool (read by the
        controller within ten ticks)."""
        self.require_admin(principal, "setting a tenant's fair share")
        return self.store.set_tenant_share(tenant, spec)

    def fair_share(self, principal: Principal) -> list[dict[str, Any]]:
        """Every tenant's share line per pool (the admin) or the caller's own, as last
        published by the controller."""
        names = {t.id: t.name for t in self.store.list_tenants()}
        rows = []
        for pool, lines in sorted(read_lines(self.store.get_meta(FAIR_SHARE_KEY)).items()):
            for tenant_id, line in sorted(lines.items()):
                if principal.scope is not None and tenant_id != principal.scope:
                    continue
                rows.append({"pool": pool, "tenant_id": tenant_id,
                             "tenant": names.get(tenant_id, tenant_id), **line})
        return rows
