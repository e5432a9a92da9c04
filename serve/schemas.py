"""Typed request and response bodies of the HTTP API, and the 422 that names the field and the fix.

Requests are the domain's validated specs (``JobSpec``, ``BagSpec``, ``TenantSpec``: extra fields
forbidden, every bound checked), so nothing invalid reaches the store. Every validation failure,
FastAPI's or the service's :class:`~controlplane.core.errors.InvalidInput`, is answered as::

    422 {"message": "deadline_hours: must be ... ; set a later deadline",
         "errors": [{"field": "deadline_hours", "message": "...", "fix": "..."}]}
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field

from controlplane.core.inputs import unprintable
from controlplane.core.models import (
    Bag,
    BagSpec,
    Job,
    JobSpec,
    Tenant,
    TenantShareSpec,
    TenantSpec,
)
from controlplane.core.readmodels import CostSummary, ZoneInfo
from controlplane.core.runtime_env import PACKAGE_NAME
from controlplane.core.units import HOUR

__all__ = [
    "ERROR_CODES",
    "ID_CURSOR",
    "MAX_CURSOR",
    "MAX_OFFSET",
    "NUMBER_CURSOR",
    "declared_errors",
    "BagCreated",
    "BagSpec",
    "ClockView",
    "CostReport",
    "ErrorBody",
    "FieldError",
    "JobSpec",
    "JobView",
    "PriceRow",
    "AvailabilityRow",
    "TenantCreated",
    "TenantSpec",
    "field_errors",
]


# --------------------------------------------------------------------------------------------
# Responses
# --------------------------------------------------------------------------------------------


class TenantCreated(BaseModel):
    """A new tenant and its API token: shown this once, only its hash is stored."""

    tenant: Tenant
    token: str = Field(description="Bearer token of the tenant; store it now, it is not shown again.")


class JobView(Job):
    """A job as the API shows it: the stored record plus derived progress and deadline figures."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_gpus(self) -> int:
        """GPUs of the whole gang (gpus_per_worker x workers)."""
        return self.spec.gpus

    @computed_field  # type: ignore[prop-decorator]
    @property
    def progress_fraction(self) -> float:
        """Compute hours done / compute hours C, in [0, 1]."""
        c = self.spec.compute_hours
        return min(1.0, self.progress_hours / c) if c > 0 else 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def met_deadline(self) -> bool | None:
        """True/False once decided; null while running or for jobs without a deadline."""
        return self.deadline_met

    @classmethod
    def of(cls, job: Job) -> JobView:
        return cls.model_construct(_fields_set=job.model_fields_set, **job.__dict__)


class BagCreated(BaseModel):
    bag: Bag
    job_ids: list[str]


class CostReport(BaseModel):
    """Spend per tenant and in total, against running the same GPU hours on on-demand only."""

    tenants: list[CostSummary]
    total_cost: float
    on_demand_cost: float
    savings_pct: float
    idle_cost: float = Field(default=0.0, description=(
        "Idle nodes' cost, apart from job costs (admin only; 0 for a tenant)."))
    spare_idle_cost: float = Field(default=0.0, description=(
        "Of idle_cost, what hot spares cost while kept for reuse (admin only)."))

    @classmethod
    def of(cls, rows: Sequence[CostSummary], idle: tuple[float, float] = (0.0, 0.0)) -> CostReport:
        total = sum(r.cost for r in rows)
        od = sum(r.on_demand_cost for r in rows)
        return cls(
            tenants=list(rows),
            total_cost=total,
            on_demand_cost=od,
            savings_pct=100.0 * (1.0 - total / od) if od > 0 else 0.0,
            idle_cost=idle[0],
            spare_idle_cost=idle[1],
        )


class PriceRow(BaseModel):
    cloud: str
    zone: str
    region: str
    instance_type: str
    accelerator: str
    accelerator_count: int
    spot_price: float
    on_demand_price: float
    spot_discount_pct: float

    @classmethod
    def of(cls, z: ZoneInfo) -> PriceRow:
        discount = 100.0 * (1.0 - z.spot_price / z.on_demand_price) if z.on_demand_price > 0 else 0.0
        return cls(
            cloud=z.cloud,
            zone=z.zone,
            region=z.region,
            instance_type=z.instance_type,
            accelerator=z.accelerator,
            accelerator_count=z.accelerator_count,
            spot_price=z.spot_price,
            on_demand_price=z.on_demand_price,
            spot_discount_pct=discount,
        )


class AvailabilityRow(BaseModel):
    cloud: str
    zone: str
    instance_type: str
    spot_available: bool
    updated_at: float


class ClockView(BaseModel):
    """The control plane's time (simulated when the fleet is)."""

    now: float = Field(description="control-plane seconds, as of the controller's last tick")
    now_hours: float


def clock_view(now: float) -> ClockView:
    return ClockView(now=now, now_hours=now / HOUR)


class FieldError(BaseModel):
    field: str = Field(description="dotted path of the offending field, e.g. template.compute_hours")
    message: str
    fix: str


class ErrorBody(BaseModel):
    message: str
    fix: str | None = None
    errors: list[FieldError] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------
# 422: name the field and the fix
# --------------------------------------------------------------------------------------------
_SOURCES = {"body", "query", "path", "header", "cookie"}
_FIELD_PREFIX = re.compile(r"^(?P<field>[A-Za-z_][\w.\[\]]*): (?P<rest>.+)$", re.S)


def _printable(part: str) -> str:
    """A location part with control and format characters escaped (never echo them raw)."""
    return part if unprintable(part) is None else part.encode("unicode_escape").decode("ascii")


def _dotted(loc: Iterable[Any]) -> str:
    parts: list[str] = []
    for p in loc:
        p = p if isinstance(p, int) else _printable(str(p))
        if isinstance(p, int):
            parts.append(f"[{p}]")
        elif parts:
            parts.append(f".{p}")
        else:
            parts.append(str(p))
    return "".join(parts)


def _split_fix(text: str) -> tuple[str, str | None]:
    """``"must be > 0; use a positive number"`` -> (message, fix); the fix follows the last '; '."""
    head, sep, tail = text.rpartition("; ")
    if sep and head:
        return head, tail
    head, sep, tail = text.partition(" — ")
    return (head, tail) if sep else (text, None)


def _builtin(kind: str, ctx: Mapping[str, Any], msg: str, field: str) -> tuple[str, str]:
    """Message and fix for pydantic's own error types."""
    bounds = {
        "greater_than": ("must be > {gt}", "use a value above {gt}"),
        "greater_than_equal": ("must be >= {ge}", "use a value of at least {ge}"),
        "less_than": ("must be < {lt}", "use a value below {lt}"),
        "less_than_equal": ("must be <= {le}", "use a value of at most {le}"),
        "string_too_short": ("must have at least {min_length} characters", "give a longer value"),
        "string_too_long": ("must have at most {max_length} characters", "shorten it"),
        "too_short": ("must have at least {min_length} items", "add items"),
        "too_long": ("must have at most {max_length} items", "split it into several requests"),
        "string_pattern_mismatch": ("must match {pattern}", "use letters, digits, '_', '.', '-'"),
    }
    if kind in bounds:
        m, f = bounds[kind]
        fix = PATTERN_FIXES.get(str(ctx.get("pattern")), f) if kind == "string_pattern_mismatch" else f
        return m.format(**ctx), fix.format(**ctx)
    if kind == "missing":
        return "is required", f"add `{field}` to the request"
    if kind == "extra_forbidden":
        return "is not a field of this request", "remove it (the fields are listed at /docs)"
    if kind in ("enum", "literal_error"):
        return f"must be one of {ctx.get('expected', '')}", f"use one of {ctx.get('expected', '')}"
    if kind == "finite_number":
        return "must be a finite number (not NaN, Infinity or beyond 1.8e308)", "send a finite number"
    if kind in ("float_parsing", "float_type"):
        return "must be a JSON number, not a string or a boolean", "send a number"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return "must be a JSON integer, not a string, a boolean or a fraction", "send an integer"
    if kind in ("bool_parsing", "bool_type"):
        return msg.lower(), "send true or false"
    if kind in ("json_invalid", "model_attributes_type", "dict_type"):
        return msg.lower(), "send a JSON object with the fields listed at /docs"
    if kind == "repeated_parameter":
        return msg, "give the parameter once"
    return msg, "see the request schema at /docs"


def field_errors(errors: Sequence[Mapping[str, Any]]) -> list[FieldError]:
    """Turn pydantic/FastAPI error dicts into field-naming errors with a fix each."""
    out: list[FieldError] = []
    for e in errors:
        loc = [p for p in e.get("loc", ()) if p not in _SOURCES]
        key = None
        if len(loc) >= 2 and loc[-1] == "[key]":  # a bad key of a mapping: name the mapping
            key, loc = _printable(str(loc[-2])), loc[:-2]
        field = _dotted(loc)
        kind = str(e.get("type", ""))
        msg = str(e.get("msg", ""))
        if key is not None:
            message, fix = _builtin(kind, e.get("ctx") or {}, msg, field or "body")
            out.append(FieldError(field=field, message=f"key '{key}' {message}",
                                  fix="use letters, digits and '_', not starting with a digit"))
            continue
        if kind == "value_error":  # raised by a model validator: "field: message; fix"
            text = msg.removeprefix("Value error, ")
            m = _FIELD_PREFIX.match(text)
            if m:
                inner = m.group("field")
                field = f"{field}.{inner}" if field else inner
                text = m.group("rest")
            message, maybe_fix = _split_fix(text)
            out.append(FieldError(field=field or "body", message=message, fix=maybe_fix or "see /docs"))
            continue
        message, fix = _builtin(kind, e.get("ctx") or {}, msg, field or "body")
        out.append(FieldError(field=field or "body", message=message, fix=fix))
    return out


def error_line(err: FieldError) -> str:
    """``"field: message; fix"`` — the one-line form a CLI prints."""
    return f"{err.field}: {err.message}; {err.fix}"


def job_spec_example() -> dict[str, Any]:
    """A valid deadline job, for /docs and the CLI's help."""
    return {
        "name": "train-llm",
        "kind": "deadline",
        "gpus_per_worker": 8,
        "workers": 1,
        "accelerator": "H100",
        "compute_hours": 20.0,
        "deadline_hours": 26.0,
    }


JobSpecBody = JobSpec
BagSpecBody = BagSpec


# Page cursors: the id of a list's last item (X-Spotplane-Next-After). A well-formed cursor that
# names no item of the list is a 404 naming ``after``; a malformed one, a 422.
ID_CURSOR = r"^[A-Za-z0-9][A-Za-z0-9_.:=+-]*$"  # tenants, jobs, bags, nodes: ``job-1a2b...``
NUMBER_CURSOR = r"^[0-9]{1,18}$"  # events and decisions, numbered by the store
MAX_CURSOR = 64
_CURSOR_FIX = "pass the X-Spotplane-Next-After of the previous page, or leave after out"
PATTERN_FIXES = {  # the fix of a value that does not match one of these patterns
    ID_CURSOR: _CURSOR_FIX,
    NUMBER_CURSOR: _CURSOR_FIX,
    PACKAGE_NAME: "use Ray's content-addressed name _ray_pkg_<hex hash>.zip "
                  "(ray._private.runtime_env.packaging.get_uri_for_directory)",
}

ERROR_CODES = (401, 403, 404, 409, 413, 422, 429, 500)
MAX_OFFSET = 10**12  # a list offset beyond any store; SQLite's integers end at 2**63 - 1


def declared_errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these error statuses, each with the API's one error body."""
    text = {
        401: "missing, malformed or unknown token",
        403: "needs the admin token (or the metrics token)",
        404: "not found (or another tenant's)",
        409: "conflicts with the current state",
        413: "request body larger than the API's cap",
        415: "a body of another media type than the route takes",
        422: "invalid input: names the field and the fix",
        429: "too many requests or too many unfinished jobs; see Retry-After",
        500: "internal error",
    }
    json_body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    out: dict[int | str, dict[str, Any]] = {  # JSON even where the route answers text (/metrics)
        c: {"model": ErrorBody, "description": text[c], "content": json_body} for c in codes}
    if 429 in out:
        out[429]["headers"] = {"Retry-After": {"description": "seconds to wait",
                                               "schema": {"type": "integer"}}}
    return out


class PackageView(BaseModel):
    """An uploaded code package: its name, the URI jobs give as ``runtime_env.working_dir``."""

    name: str
    uri: str
    bytes: int
    created: bool

    @classmethod
    def of(cls, name: str, size: int, *, created: bool) -> PackageView:
        return cls(name=name, uri=f"gcs://{name}", bytes=size, created=created)


class SpendView(BaseModel):
    """A tenant's spend against its limits this UTC month: spend, headroom and the line reached."""

    tenant_id: str
    month: str = Field(description="UTC calendar month (YYYY-MM).")
    month_spend: float = Field(description="Dollars spent this month.")
    monthly_budget: float | None
    monthly_headroom: float | None = Field(description="monthly_budget - month_spend, at least 0.")
    monthly_level: str = Field(description="ok | soft | hard")
    spend_rate: float = Field(description="$/h of the nodes the tenant's jobs hold now.")
    hourly_cap: float | None
    hourly_headroom: float | None = Field(description="hourly_cap - spend_rate, at least 0.")
    hourly_level: str = Field(description="ok | soft | hard")
    soft_fraction: float
    protected: str = Field(description="HP and deadline jobs at the monthly hard line.")


class TenantMe(Tenant):
    """The calling tenant with its spend and headroom."""

    spend: SpendView


class NodeNotice(BaseModel):
    """A node's preemption notice, as its watcher read it from the metadata server."""

    model_config = ConfigDict(extra="forbid")

    action: str = Field(min_length=1, max_length=64)
    seconds_left: float = Field(ge=0.0, le=86_400.0)
    raw: str = Field(default="", max_length=4096)


class BootFailure(BaseModel):
    """A node's failed bootstrap: why, and the last lines of its log."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=256)
    log_tail: str = Field(default="", max_length=16_384)


class NodeReportAck(BaseModel):
    """A node's report, kept for the controller's next tick."""

    instance_id: str
    kind: str


class FairShareSet(TenantShareSpec):
    """Admin: set a tenant's fair-share weight and nominal GPUs per pool."""

    tenant: str = Field(min_length=1, max_length=64, description="The tenant's id or name.")


class FairShareLine(BaseModel):
    """A tenant's standing in one pool, as the controller last published it (GPUs)."""

    pool: str
    tenant_id: str
    tenant: str
    weight: float
    nominal_gpus: float
    entitled_gpus: float
    held_gpus: float
    borrowed_gpus: float
    lent_gpus: float
