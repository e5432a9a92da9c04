"""A bill's lines in cents add up to its total exactly, per job and summed per tenant and month;
the CSV has one header and a row per bill."""

from __future__ import annotations

import random

import pytest

from controlplane.core.bills import CSV_COLUMNS, DOLLAR_LINES, job_bill, summed, to_cents, to_csv
from controlplane.core.models import Job, JobKind, JobSpec
from controlplane.reconcile.jobs import book_overhead


def _job(i: int, tenant: str, lines: dict[str, float]) -> Job:
    return Job(id=f"job-{i:012x}", tenant_id=tenant, name=f"j{i}", kind=JobKind.SPOT,
               spec=JobSpec(name=f"j{i}", compute_hours=1.0), submitted_at=0.0, bill=lines)


def test_rounded_lines_sum_to_the_rounded_total() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        lines = {k: rng.choice([0.0, rng.uniform(0, 50), rng.uniform(0, 0.02)])
                 for k in DOLLAR_LINES}
        cents, total = to_cents(lines)
        assert round(sum(cents.values()) * 100) == round(total * 100)
        assert total == round(sum(lines.values()), 2)
        assert all(abs(cents[k] - lines[k]) < 0.01 + 1e-9 for k in lines)


def test_by_hand_three_thirds() -> None:
    cents, total = to_cents({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3})
    assert total == 1.0 and sorted(cents.values()) == [0.33, 0.33, 0.34]


def test_float_dust_is_no_negative_cent() -> None:
    bill = job_bill(_job(1, "t", {"spot_compute": -1e-15, "lost_work": 0.5}), "1970-01")
    assert bill.lines["spot_compute"] == 0.0 and bill.total == 0.5


def test_tenant_month_sums_and_csv() -> None:
    rng = random.Random(3)
    jobs = [_job(i, f"t{i % 3}", {k: rng.uniform(0, 5) for k in DOLLAR_LINES}) for i in range(30)]
    per_job = [job_bill(j, "1970-01") for j in jobs]
    per_tenant = summed(per_job)
    assert [b.tenant_id for b in per_tenant] == ["t0", "t1", "t2"]
    for b in per_tenant:
        assert b.jobs == 10
        assert round(sum(b.lines.values()), 2) == b.total
        assert b.total == round(sum(p.total for p in per_job if p.tenant_id == b.tenant_id), 2)
    text = to_csv(per_tenant).splitlines()
    assert text[0] == ",".join(CSV_COLUMNS) and len(text) == 4


def test_a_line_of_whole_cents_stays_whole() -> None:
    assert to_cents({"a": 0.29, "b": 0.0, "c": 1.15}) == ({"a": 0.29, "b": 0.0, "c": 1.15}, 1.44)


def test_an_executors_hours_without_progress_are_its_checkpoint_and_restore_overhead() -> None:
    job = _job(9, "t", {})
    book_overhead(job, 0.0, 3600.0, 0.9)  # 1 h on nodes, 0.9 h of progress: 0.1 h overhead
    assert job.bill["checkpoint_hours"] == pytest.approx(0.1)
    book_overhead(job, 3600.0, 7200.0, 1.05)  # a lagging report catches up: nothing new
    assert job.bill["checkpoint_hours"] == pytest.approx(0.1)
    book_overhead(job, 7200.0, 10800.0, 0.8)  # running sum 0.1 - 0.05 + 0.2 = 0.25
    assert job.bill["checkpoint_hours"] == pytest.approx(0.25)
