"""Tenants in the store: creation, tokens, limits, and their rows read back."""

from __future__ import annotations

from typing import Any

from controlplane.core.counters import counter_key, parse_key
from controlplane.core.errors import Conflict, NotFound
from controlplane.core.models import (
    NODE_GONE,
    Node,
    Tenant,
    TenantBudget,
    TenantShare,
    TenantShareSpec,
    TenantSpec,
    new_id,
)
from controlplane.core.tokens import hash_token, new_token
from controlplane.core.units import HOUR
from controlplane.store.base import StoreBase
from controlplane.store.rows import (
    ADD_DEMAND,
    BadRow,
    limit_clause,
    load_error,
    log,
    log_bad,
    split_bad,
)


class TenantRows(StoreBase):
    """Tenants: what the API and the controller read and write of them."""

    # -- tenants -------------------------------------------------------------------------------
    def create_tenant(self, spec: TenantSpec | str, *, max_gpus: int | None = None,
                      token: str | None = None, now: float | None = None) -> tuple[Tenant, str]:
        """Create a tenant; returns it and its API token (shown once, stored hashed)."""
        if isinstance(spec, str):
            spec = TenantSpec(name=spec, max_gpus=max_gpus or 64)
        token = token or new_token()
        tenant = Tenant(id=new_id("ten"), name=spec.name, max_gpus=spec.max_gpus,
                        created_at=self.control_time() if now is None else now,
                        token_hash=hash_token(token))
        try:
            with self._tx() as db:
                db.execute("INSERT INTO tenants VALUES (?, ?, ?, ?, ?)",
                           (tenant.id, tenant.name, tenant.token_hash, tenant.max_gpus,
                            tenant.created_at))
        except self._sql.integrity_errors() as exc:
            raise Conflict(f"tenant {spec.name!r} already exists",
                           fix="choose another name") from exc
        return tenant, token

    def _tenant(self, row: tuple[Any, ...]) -> Tenant:
        return Tenant(id=row[0], name=row[1], token_hash=row[2], max_gpus=row[3],
                      created_at=row[4])

    def _tenant_row(self, row: tuple[Any, ...]) -> Tenant | BadRow:
        """A tenant from its row, or the reason it does not load."""
        try:
            return self._tenant(row)
        except Exception as exc:  # noqa: BLE001 - any unloadable row is quarantined, not fatal
            return BadRow("tenants", str(row[0]), load_error(exc), tenant_id=str(row[0]))

    def load_tenants(self) -> tuple[list[Tenant], list[BadRow]]:
        """Every tenant that loads, and the rows that do not (the controller's view)."""
        return split_bad(self._tenant_row(r)
                      for r in self._q("SELECT * FROM tenants ORDER BY created_at, id"))

    def tenant_by_token(self, token: str) -> Tenant | None:
        rows = self._q("SELECT * FROM tenants WHERE token_hash = ?", (hash_token(token),))
        found = self._tenant_row(rows[0]) if rows else None
        if isinstance(found, BadRow):
            log.error("refusing the token of %s", found.describe())
            return None
        return found

    def get_tenant(self, tenant_id: str) -> Tenant:
        rows = self._q("SELECT * FROM tenants WHERE id = ? OR name = ?", (tenant_id, tenant_id))
        if not rows:
            raise NotFound(f"tenant {tenant_id} not found")
        return self._tenant(rows[0])

    def list_tenants(self, *, after: str | None = None, limit: int | None = None) -> list[Tenant]:
        """Every tenant that loads, oldest first (a row that does not is logged and left out);
        with ``after`` / ``limit`` one cursor page of them."""
        if after is None and limit is None:
            return log_bad(*self.load_tenants())
        where, args = self._after("tenants", "created_at", after)
        rows = self._q(f"SELECT * FROM tenants{where} ORDER BY created_at, id{limit_clause(limit)}", args)
        return log_bad(*split_bad(self._tenant_row(r) for r in rows))

    def add_demand(self, tenant_id: str, at: float, hp_gpu_hours: float,
                   spot_gpu_hours: float) -> None:
        """Accumulate GPU-hours demanded in the hour containing ``at`` (forecaster input)."""
        hour = int(at // HOUR)
        with self._tx() as db:
            db.execute(ADD_DEMAND, (tenant_id, hour, hp_gpu_hours, spot_gpu_hours))

    def demand_history(self, tenant_id: str, hours: int, until: float,
                       kind: str = "hp") -> list[float]:
        """Mean GPUs demanded per hour over the ``hours`` whole hours before ``until``."""
        last = int(until // HOUR)
        col = "hp_gpu_hours" if kind == "hp" else "spot_gpu_hours"
        rows = dict(self._q(f"SELECT hour, {col} FROM demand WHERE tenant_id = ? AND hour >= ? "
                            "AND hour < ?", (tenant_id, last - hours, last)))
        return [float(rows.get(h, 0.0)) for h in range(last - hours, last)]


    # -- budgets -------------------------------------------------------------------------------
    def set_budget(self, tenant_id: str, budget: TenantBudget, *, now: float | None = None) -> None:
        """Store the tenant's spend limits (replacing any earlier ones)."""
        self.get_tenant(tenant_id)
        at = self.control_time() if now is None else now
        with self._tx() as db:
            db.execute("INSERT INTO tenant_budgets (tenant_id, body, updated_at) VALUES (?, ?, ?) "
                       "ON CONFLICT (tenant_id) DO UPDATE SET body = excluded.body, "
                       "updated_at = excluded.updated_at",
                       (tenant_id, budget.model_dump_json(), at))

    def budgets(self) -> dict[str, TenantBudget]:
        """Every tenant's spend limits (a tenant without a row has none)."""
        return {str(t): TenantBudget.model_validate_json(b)
                for t, b in self._q("SELECT tenant_id, body FROM tenant_budgets")}

    def budget(self, tenant_id: str) -> TenantBudget:
        """The tenant's spend limits (all null when none were set)."""
        rows = self._q("SELECT body FROM tenant_budgets WHERE tenant_id = ?", (tenant_id,))
        return TenantBudget.model_validate_json(rows[0][0]) if rows else TenantBudget()

    def month_spend(self, month: str) -> dict[str, float]:
        """Dollars each tenant spent in ``month`` (YYYY-MM), from the loop's spend counter."""
        prefix = counter_key("tenant_month_spend_dollars_total").split("{")[0] + "{"
        out: dict[str, float] = {}
        for key, value in self._q("SELECT name, value FROM counters WHERE name LIKE ?",
                                  (prefix + "%",)):
            _, labels = parse_key(str(key))
            if labels.get("month") == month:
                out[labels["tenant"]] = out.get(labels["tenant"], 0.0) + float(value)
        return out

    def spend_rates(self) -> dict[str, float]:
        """Each tenant's spend rate: the $/h of the live nodes its jobs hold."""
        out: dict[str, float] = {}
        gone = tuple(s.value for s in NODE_GONE)
        rows = self._q(f"SELECT body FROM nodes WHERE job_id IS NOT NULL AND state NOT IN "
                       f"({', '.join('?' for _ in gone)})", gone)
        for (body,) in rows:
            n = Node.model_validate_json(body)
            if n.tenant_id is not None:
                out[n.tenant_id] = out.get(n.tenant_id, 0.0) + n.price_per_hour
        return out

    # -- fair share ----------------------------------------------------------------------------
    def set_tenant_share(self, tenant_id: str, spec: TenantShareSpec) -> TenantShare:
        """Set a tenant's weight and nominal GPUs per pool (by id or name)."""
        tenant = self.get_tenant(tenant_id)
        share = TenantShare(tenant_id=tenant.id, **spec.model_dump())
        with self._tx() as db:
            db.execute("INSERT INTO tenant_shares (tenant_id, body) VALUES (?, ?) ON CONFLICT "
                       "(tenant_id) DO UPDATE SET body = excluded.body",
                       (tenant.id, share.model_dump_json()))
        return share

    def tenant_shares(self) -> dict[str, TenantShare]:
        """Every tenant's fair share that was set (a tenant not here has weight 1, no nominal)."""
        out: dict[str, TenantShare] = {}
        for tenant_id, body in self._q("SELECT tenant_id, body FROM tenant_shares"):
            try:
                out[str(tenant_id)] = TenantShare.model_validate_json(body)
            except ValueError:
                log.error("tenant share of %s does not load; weight 1 is used", tenant_id)
        return out
