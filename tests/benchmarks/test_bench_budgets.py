"""benchmarks.budgets on the real openb trace: the hourly caps hold within one tick's spend,
and without the rule the same load overshoots them."""

from __future__ import annotations

from pathlib import Path

from benchmarks.budgets import main, run


def test_a_week_of_openb_load_stays_under_each_tenants_cap(data_root: Path) -> None:
    res = run(tenants=3, days=7.0, tick=300.0, root=str(data_root))
    assert res["jobs"] > 100
    assert res["cap_overshoot_ticks"] <= 1.0
    assert res["uncapped_overshoot_ticks"] > 1.0
    assert all(p["spend_capped"] > 0 for p in res["per_tenant"])


def test_json_carries_cap_overshoot_ticks(data_root: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["--json", "--days", "2", "--tick", "600", "--data-dir", str(data_root)]) == 0
    assert '"cap_overshoot_ticks"' in capsys.readouterr().out
