"""The suite's check that no controller tick raised (``tests/tickwatch.py``) fails a test whose
controller's tick raised, and holds a test to the failures its marker expects.

Each case runs in a pytest of its own (pytester, in a child process): a ControllerActor in that
process, its ``Controller.tick`` made to raise, ticking once a wall second (so a test that stops
it right after its first tick saw exactly one failure).
"""

from __future__ import annotations

import os

import pytest

from controlplane.core.config import REPO_ROOT

pytest_plugins = ["pytester"]

CONFTEST = '''
import pytest
from tests import tickwatch
from tests.tickwatch import no_tick_failures  # noqa: F401

def pytest_configure(config):
    config.addinivalue_line("markers", "tick_failures(n, match=None): expected failed ticks")
    tickwatch.start()

def pytest_unconfigure(config):
    tickwatch.stop()
'''

CASES = '''
import pytest
from actors.controller import ControllerActor
from actors.runtime import RuntimeSettings
from controlplane.reconcile.controller import Controller
from tests.support import wait_until


def run_controller(tmp_path, monkeypatch, failing):
    if failing:
        def boom(self):
            raise RuntimeError("the tick exploded")
        monkeypatch.setattr(Controller, "tick", boom)
    # 60 s ticks at 60 sim s per wall s: one tick, then a wait the shutdown cuts short
    s = RuntimeSettings(state_dir=tmp_path, speed=60.0, policy_actors=False, forecaster=False,
                        fleet_options={"gcp": False})
    actor = ControllerActor(s.actor_config())
    try:
        wait_until(lambda: actor.tick_failures or actor.status()["ticks"], 30, "one tick")
    finally:
        actor.shutdown()
    return actor


def test_unmarked_and_a_tick_raised(tmp_path, monkeypatch):
    actor = run_controller(tmp_path, monkeypatch, failing=True)
    assert actor.tick_failures == 1  # the test body passes: only the fixture can fail it


def test_unmarked_and_healthy(tmp_path, monkeypatch):
    assert run_controller(tmp_path, monkeypatch, failing=False).tick_failures == 0


@pytest.mark.tick_failures(1, match="the tick exploded")
def test_marked_and_the_failure_came(tmp_path, monkeypatch):
    run_controller(tmp_path, monkeypatch, failing=True)


@pytest.mark.tick_failures(1, match="something else")
def test_marked_but_another_failure(tmp_path, monkeypatch):
    run_controller(tmp_path, monkeypatch, failing=True)


@pytest.mark.tick_failures(1)
def test_marked_but_no_failure(tmp_path, monkeypatch):
    run_controller(tmp_path, monkeypatch, failing=False)
'''


def test_the_fixture_fails_exactly_the_tests_whose_ticks_raised_unexpectedly(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_cases=CASES)
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider",
                                           "-o", "addopts=", "-rA")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 5 and outcomes.get("errors") == 3, result.stdout.str()
    out = result.stdout.str()
    for line in ("ERROR test_cases.py::test_unmarked_and_a_tick_raised",
                 "ERROR test_cases.py::test_marked_but_another_failure",
                 "ERROR test_cases.py::test_marked_but_no_failure",
                 "PASSED test_cases.py::test_unmarked_and_healthy",
                 "PASSED test_cases.py::test_marked_and_the_failure_came"):
        assert line in out, out
    assert "1 controller tick(s) raised during this test" in out
    assert "RuntimeError('the tick exploded')" in out
    assert "failed ticks that do not match 'something else'" in out
    assert "expected 1 failed controller tick(s), recorded 0" in out
