"""Small runs of the policy benchmarks, pinned whole (``golden/benchmarks.json``): every deadline
policy on real traces (Can't Be Late's Table 3, gangs), the multi-zone policies with free and
paid observation, the checkpoint schedules and VM reuse by age on Google's preemption fit.

Each figure is the record of the current behaviour, not hand-computed (those are in the policy
test modules): a change that means to alter a policy regenerates the file with
``SPOTPLANE_UPDATE_GOLDEN=1 pytest tests/policies/test_golden_benchmarks.py`` and shows the
difference in review. Wall-clock timings are left out.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks import checkpoint, deadline, multiregion, reuse

GOLDEN = Path(__file__).with_name("golden") / "benchmarks.json"
WALL_CLOCK = frozenset({"policy_seconds", "core_policy_seconds", "seconds", "seconds_total",
                        "scaling_exponent", "decide_us"})  # timings and what is fitted to them
TIMED_TARGET = re.compile(r"<[\d.]+s(_cpu)?$")  # e.g. "5h<0.2s": a speed target, the machine's

RUNS: dict[str, tuple[Callable[[list[str]], int], list[str]]] = {
    "deadline_table3": (deadline.main, ["table3", "--windows", "2", "--workers", "1", "--json", "--policies",
                                        "on_demand,greedy,uniform_progress,time_sliced,partial_lookahead,up_oracle,omniscient"]),
    "deadline_gang": (deadline.main, ["gang", "--windows", "1", "--workers", "1", "--json"]),
    "multiregion_free": (multiregion.main, ["--windows", "4", "--json"]),
    "multiregion_paid_6_zones": (multiregion.main, ["--windows", "4", "--observe", "paid",
                                                    "--zones", "6", "--json"]),
    "checkpoint": (checkpoint.main, ["--json"]),
    "reuse": (reuse.main, ["--json"]),
}


def _without_timings(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _without_timings(v) for k, v in x.items()
                if k not in WALL_CLOCK and not TIMED_TARGET.search(k)}
    if isinstance(x, list):
        return [_without_timings(v) for v in x]
    return x


def _recorded() -> dict[str, Any]:
    found: dict[str, Any] = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    return found


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_small_benchmark_run_gives_what_it_gave(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    run, argv = RUNS[name]
    capsys.readouterr()
    assert run(argv) == 0
    got = _without_timings(json.loads(capsys.readouterr().out))
    if os.environ.get("SPOTPLANE_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps({**_recorded(), name: got}, indent=1, sort_keys=True) + "\n")
    want = _recorded().get(name)
    assert got == want, (f"benchmarks.{argv[0] if name.startswith('deadline') else name.split('_')[0]} "
                         f"{' '.join(argv)} changed (SPOTPLANE_UPDATE_GOLDEN=1 if meant):\n"
                         f"recorded {json.dumps(want, sort_keys=True)[:1500]}\n"
                         f"now      {json.dumps(got, sort_keys=True)[:1500]}")
