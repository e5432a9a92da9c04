"""The wall-paced loop of embedded planes: it advances the simulated clock speed-fold, ticks,
stops ticking while paused, and hands a failed tick to its caller and goes on."""

from __future__ import annotations

import threading

from controlplane.core.clock import SimClock
from controlplane.reconcile.pacer import PacedLoop
from tests.support import wait_until


def test_it_ticks_on_a_clock_advanced_by_wall_time_times_speed() -> None:
    clock, ticks = SimClock(start=0.0), []
    with PacedLoop(lambda: ticks.append(clock.now()), clock, 1000.0, period_s=0.01):
        wait_until(lambda: len(ticks) >= 5, 30, "five ticks")
    assert ticks == sorted(ticks) and ticks[-1] > ticks[0]
    # 1000 simulated seconds a wall second: several rounds of 10 ms are seconds of simulated time
    assert ticks[-1] >= 10.0, ticks


def test_a_paused_loop_neither_ticks_nor_advances() -> None:
    clock, ticks, paused = SimClock(start=0.0), [], threading.Event()
    loop = PacedLoop(lambda: ticks.append(1), clock, 1000.0, period_s=0.01, paused=paused)
    with loop:
        wait_until(lambda: ticks, 30, "a first tick")
        paused.set()
        after = loop.rounds + 1  # the round in flight may still tick
        wait_until(lambda: loop.rounds >= after + 3, 30, "three paused rounds")
        seen, frozen = len(ticks), clock.now()
        wait_until(lambda: loop.rounds >= after + 6, 30, "three more paused rounds")
        assert (len(ticks), clock.now()) == (seen, frozen)
        paused.clear()
        wait_until(lambda: len(ticks) > seen, 30, "ticks again once resumed")


def test_a_failed_tick_goes_to_the_caller_and_the_loop_goes_on() -> None:
    clock, failures, calls = SimClock(start=0.0), [], []

    def tick() -> None:
        calls.append(1)
        if len(calls) <= 2:
            raise RuntimeError("store busy")

    with PacedLoop(tick, clock, 1.0, period_s=0.01,
                   on_error=lambda n, exc: failures.append((n, str(exc)))):
        wait_until(lambda: len(calls) >= 4, 30, "ticks after the failures")
    assert failures == [(1, "store busy"), (2, "store busy")]
