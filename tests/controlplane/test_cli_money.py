"""``spotplane budget``, ``spotplane bills`` and the spend under ``spotplane cost``, against a
stub client (the API's answers are tested in tests/serve/test_budgets_api.py)."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from controlplane.cli import control, money

VIEW = {"tenant_id": "ten-1", "month": "2026-11", "month_spend": 12.5, "monthly_budget": 100.0,
        "monthly_headroom": 87.5, "monthly_level": "ok", "spend_rate": 1.84, "hourly_cap": 2.0,
        "hourly_headroom": 0.16, "hourly_level": "soft", "soft_fraction": 0.8,
        "protected": "finish"}


class StubClient:
    def __init__(self) -> None:
        self.set: list[tuple[str, dict[str, Any]]] = []

    def __enter__(self) -> StubClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def budgets(self) -> list[dict[str, Any]]:
        return [VIEW]

    def set_budget(self, tenant: str, body: dict[str, Any]) -> dict[str, Any]:
        self.set.append((tenant, body))
        return VIEW

    def bills(self, **kw: Any) -> Any:
        if kw.get("fmt") == "csv":
            return "month,tenant_id\n2026-11,ten-1\n"
        return [{"month": "2026-11", "tenant_id": "ten-1", "job_name": "a", "total": 1.0,
                 "lines": dict.fromkeys(money.DOLLAR_LINES, 0.0) | {"spot_compute": 1.0}}]


def _args(**kw: Any) -> argparse.Namespace:
    base = {"json": False, "tenant": None, "hourly_cap": None, "monthly": None, "soft": 0.8,
            "protected": "finish", "month": None, "per": "job", "csv": False}
    return argparse.Namespace(**(base | kw))


def test_budget_sets_the_limits_and_shows_spend_and_headroom(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    stub = StubClient()
    monkeypatch.setattr(money, "client_of", lambda args: stub)
    assert money.cmd_budget(_args(tenant="acme", hourly_cap=2.0, monthly=100.0)) == 0
    assert stub.set == [("acme", {"hourly_cap": 2.0, "monthly_budget": 100.0,
                                  "soft_fraction": 0.8, "protected": "finish"})]
    out = capsys.readouterr().out
    assert "headroom $" in out and "87.50" in out and "soft" in out


def test_bills_print_a_table_or_csv(monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(money, "client_of", lambda args: StubClient())
    assert money.cmd_bills(_args()) == 0
    assert "spot_compute" in capsys.readouterr().out
    assert money.cmd_bills(_args(csv=True)) == 0
    assert capsys.readouterr().out == "month,tenant_id\n2026-11,ten-1\n"


def test_print_spend_is_silent_without_budgets(capsys: pytest.CaptureFixture[str]) -> None:
    class Empty(StubClient):
        def budgets(self) -> list[dict[str, Any]]:
            return []
    control.print_spend(Empty())  # type: ignore[arg-type]
    assert capsys.readouterr().out == ""
