"""A controller's loop on a simulated clock that wall time paces: each round advances the clock
by the wall time since the last one times ``speed`` and ticks. Embedded planes run it in a
thread (the benchmarks and tests that drive real jobs through a real API).

A paused loop neither advances the clock nor ticks, so a caller can change the world (remove a
region, report a loss) and let the controller see the change the way a provider reports it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from controlplane.core.clock import SimClock

TickFailed = Callable[[int, Exception], None]  # (failures so far, the error): the next round retries


class PacedLoop:
    """Ticks ``tick`` every ``period_s`` wall seconds on ``clock`` advanced ``speed``-fold."""

    def __init__(self, tick: Callable[[], object], clock: SimClock, speed: float, *,
                 period_s: float = 0.2, on_error: TickFailed | None = None,
                 paused: threading.Event | None = None) -> None:
        self.tick = tick
        self.clock = clock
        self.speed = speed
        self.period_s = period_s
        self.on_error = on_error
        self.paused = paused if paused is not None else threading.Event()
        self.failures = 0
        self.rounds = 0  # rounds done, paused or not
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="paced-loop", daemon=True)

    def start(self) -> PacedLoop:
        """Start ticking in the background; returns self."""
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop after the round in progress (waits up to ``timeout_s`` for it)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            if not self.paused.is_set():
                self.clock.advance((now - last) * self.speed)
                self._tick_once()
            last = now
            self.rounds += 1
            self._stop.wait(self.period_s)

    def _tick_once(self) -> None:
        try:
            self.tick()
        except Exception as exc:  # noqa: BLE001 - the next round retries; the caller hears why
            self.failures += 1
            if self.on_error is None:
                raise
            self.on_error(self.failures, exc)

    def __enter__(self) -> PacedLoop:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
