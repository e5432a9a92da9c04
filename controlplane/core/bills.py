"""A job's full bill: its cost in lines that add up to its total to the cent, summed per tenant
and month, and exported as CSV or JSON a finance team can load.

The reconcile loop accrues each line in ``Job.bill`` (dollars under the names of
:data:`DOLLAR_LINES`, hours under :data:`HOUR_LINES`); egress is ``Job.egress_cost``. Node time
is split as it is billed: provisioning (launched until the gang's last node is ready; and from
the job's end until its nodes are let go), changeover (the overhead ``d`` after every start: the
restore from the last checkpoint and warm-up), checkpoint (writing checkpoints), and compute by
market; at a preemption the compute since the last checkpoint moves from its market's compute
line to ``lost_work`` at the price paid. Probes a deadline policy bought, the idle time of a hot
spare a job reused, and egress are lines of their own.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence

from pydantic import BaseModel, Field

from controlplane.core.models import Job, Node

#: Dollar lines, in the order a bill lists them.
DOLLAR_LINES: tuple[str, ...] = (
    "spot_compute", "on_demand_compute", "lost_work", "checkpoint", "changeover",
    "provisioning", "probes", "egress", "spares")
#: Hour lines: GPU hours billed per market, and wall hours of work lost to preemptions.
HOUR_LINES: tuple[str, ...] = ("spot_gpu_hours", "on_demand_gpu_hours", "lost_work_hours")
#: Node dollars the loop splits as it bills (the rest are added apart from node time).
NODE_LINES: tuple[str, ...] = (
    "spot_compute", "on_demand_compute", "lost_work", "checkpoint", "changeover", "provisioning")


class Bill(BaseModel):
    """One bill (a job's, or a tenant's month): dollar lines in cents that sum to the total."""

    tenant_id: str
    month: str = Field(description="UTC calendar month (YYYY-MM) the job was submitted in.")
    job_id: str | None = None
    job_name: str | None = None
    lines: dict[str, float] = Field(description="Dollars per line, rounded to the cent.")
    hours: dict[str, float] = Field(description="GPU hours per market and hours of lost work.")
    total: float = Field(description="Dollars: exactly the sum of the lines.")
    jobs: int = 1


def raw_lines(job: Job) -> dict[str, float]:
    """The job's dollar lines unrounded (egress from ``Job.egress_cost``)."""
    out = {name: float(job.bill.get(name, 0.0)) for name in DOLLAR_LINES}
    out["egress"] = float(job.egress_cost)
    return {k: v if abs(v) > 1e-9 else 0.0 for k, v in out.items()}  # float dust is no cent


def to_cents(lines: Mapping[str, float]) -> tuple[dict[str, float], float]:
    """Round every line to the cent so the rounded lines sum to the rounded total exactly:
    each line is floored in cents, and the cents left over go to the largest remainders."""
    cents_total = round(sum(lines.values()) * 100)
    floors = {k: math.floor(round(v * 100, 6)) for k, v in lines.items()}  # 0.29 is 29 cents
    left = cents_total - sum(floors.values())
    order = sorted(lines, key=lambda k: (-(lines[k] * 100 - floors[k]), k))
    for k in order[:max(0, left)]:
        floors[k] += 1
    return {k: floors[k] / 100 for k in lines}, cents_total / 100


def job_bill(job: Job, month: str) -> Bill:
    """The job's bill, lines in cents summing to its total."""
    lines, total = to_cents(raw_lines(job))
    hours = {name: round(float(job.bill.get(name, 0.0)), 6) for name in HOUR_LINES}
    return Bill(tenant_id=job.tenant_id, month=month, job_id=job.id, job_name=job.name,
                lines=lines, hours=hours, total=total)


def summed(bills: Iterable[Bill]) -> list[Bill]:
    """Per tenant and month, the bills' lines summed (cents: the sums of cents stay exact)."""
    groups: dict[tuple[str, str], Bill] = {}
    for b in bills:
        key = (b.tenant_id, b.month)
        g = groups.get(key)
        if g is None:
            groups[key] = Bill(tenant_id=b.tenant_id, month=b.month, lines=dict(b.lines),
                               hours=dict(b.hours), total=b.total, jobs=1)
            continue
        g.lines = {k: round(g.lines.get(k, 0.0) + v, 2) for k, v in b.lines.items()}
        g.hours = {k: round(g.hours.get(k, 0.0) + v, 6) for k, v in b.hours.items()}
        g.total = round(g.total + b.total, 2)
        g.jobs += 1
    return [groups[k] for k in sorted(groups)]


CSV_COLUMNS: tuple[str, ...] = (
    "month", "tenant_id", "job_id", "job_name", "jobs", *DOLLAR_LINES, "total", *HOUR_LINES)


def to_csv(bills: Sequence[Bill]) -> str:
    """One row per bill, dollars and hours in their own columns (RFC 4180, header first)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for b in bills:
        w.writerow([b.month, b.tenant_id, b.job_id or "", b.job_name or "", b.jobs,
                    *[f"{b.lines.get(k, 0.0):.2f}" for k in DOLLAR_LINES], f"{b.total:.2f}",
                    *[f"{b.hours.get(k, 0.0):.6f}" for k in HOUR_LINES]])
    return buf.getvalue()


def add(job: Job, amounts: Mapping[str, float]) -> None:
    """Add ``amounts`` to the job's bill lines (one assignment, so the store saves it)."""
    if not any(amounts.values()):
        return
    merged = dict(job.bill)
    for name, value in amounts.items():
        merged[name] = merged.get(name, 0.0) + value
    job.bill = merged


def node_price(node: Node) -> float:
    """The $/h a node is billed at: its price, else (not a number: a type no catalog priced) its
    on-demand price, the most it can cost, else 0; never NaN."""
    for price in (node.price_per_hour, node.on_demand_price_per_hour):
        if math.isfinite(price) and price >= 0:
            return float(price)
    return 0.0
