"""The control plane's one clock. No other code reads ``time.time()``.

``WallClock`` for real fleets; ``SimClock`` for the simulated fleet, either stepped by hand
(tests, replays) or running ``speed`` simulated seconds per wall second (``--speed 3600``).
Times are float seconds since the Unix epoch (simulated epoch for ``SimClock``).

Every component reads a :class:`Clock`; the loop and the replays also move a :class:`ManualClock`
by hand, and ask ``isinstance(clock, ManualClock)`` rather than whether a method is there.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """What every component asks for the time."""

    def now(self) -> float:
        """Seconds since the epoch, on this clock."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block until ``seconds`` of this clock's time have passed."""
        ...


@runtime_checkable
class ManualClock(Clock, Protocol):
    """A clock that is also moved by hand (``SimClock``): the control loop steps it one tick at a
    time, a restart sets it to the stored control time."""

    @property
    def speed(self) -> float:
        """Simulated seconds per wall second (0: it only moves by hand)."""
        ...

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds``; returns the new time."""
        ...

    def set(self, t: float) -> None:
        """Jump to ``t`` if it is ahead."""
        ...


class WallClock(Clock):
    """Real time."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class SimClock(ManualClock):
    """Simulated time: ``start + speed * wall seconds elapsed + manual advances``.

    With ``speed=0`` it only moves by :meth:`advance` (deterministic tests and replays).
    """

    def __init__(self, start: float = 0.0, speed: float = 0.0) -> None:
        if speed < 0:
            raise ValueError(f"speed must be >= 0, got {speed}")
        self._lock = threading.Lock()
        self._base = float(start)
        self._speed = float(speed)
        self._wall0 = time.monotonic()

    @property
    def speed(self) -> float:
        return self._speed

    def now(self) -> float:
        with self._lock:
            return self._base + self._speed * (time.monotonic() - self._wall0)

    def advance(self, seconds: float) -> float:
        """Move the clock forward by ``seconds``; returns the new time."""
        if seconds < 0:
            raise ValueError(f"cannot move a clock backwards ({seconds} s)")
        with self._lock:
            self._base += seconds
            return self._base + self._speed * (time.monotonic() - self._wall0)

    def set(self, t: float) -> None:
        """Jump to ``t`` if it is ahead (restores after a restart)."""
        with self._lock:
            current = self._base + self._speed * (time.monotonic() - self._wall0)
            if t > current:
                self._base += t - current

    def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        if self._speed > 0:
            time.sleep(seconds / self._speed)
        else:
            self.advance(seconds)
