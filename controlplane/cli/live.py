"""A live terminal table of jobs with progress bars (plain ANSI, no dependency).

On a TTY :class:`LiveTable` redraws in place (cursor up + clear below); elsewhere (CI, a pipe, a
log file) it prints one plain line per job state change and a short summary every
``summary_every`` seconds, so logs stay readable.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from controlplane.core.units import HOUR

BAR_WIDTH = 20
_COLORS = {
    "RUNNING": "\x1b[32m",
    "CHECKPOINTING": "\x1b[36m",
    "PREEMPTED": "\x1b[33m",
    "SUCCEEDED": "\x1b[1;32m",
    "FAILED": "\x1b[31m",
    "CANCELLED": "\x1b[90m",
}
_RESET = "\x1b[0m"


def progress_bar(fraction: float, width: int = BAR_WIDTH, *, ascii_only: bool = False) -> str:
    """``[#######.............]`` (or block characters) for ``fraction`` in [0, 1]."""
    f = min(1.0, max(0.0, fraction))
    full = int(round(f * width))
    if ascii_only:
        return "[" + "#" * full + "." * (width - full) + "]"
    return "\u2588" * full + "\u2591" * (width - full)


def _hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / HOUR:6.1f}h"


def _deadline_cell(job: Mapping[str, Any], now: float) -> str:
    deadline = job.get("deadline_at")
    if deadline is None:
        return "-"
    finished = job.get("finished_at")
    if finished is not None:
        slack = (deadline - finished) / HOUR
        return f"met +{slack:.1f}h" if slack >= 0 else f"MISSED {slack:.1f}h"
    return f"{(deadline - now) / HOUR:.1f}h left"


def job_row(job: Mapping[str, Any], now: float, tenant: str, *, ascii_only: bool, color: bool,
            width: int | None = None) -> str:
    """One table line for a job as the API returns it (cut to ``width`` visible characters)."""
    state = str(job.get("state", "?"))
    frac = float(job.get("progress_fraction", 0.0))
    name = str(job.get("name", job.get("id", "")))[:22]
    market = job.get("market") or ""
    head = f"{name:<22} {tenant[:8]:<8} {job.get('kind', ''):<8} "
    cell = f"{state:<13}"
    rest = (
        f" {progress_bar(frac, ascii_only=ascii_only)} {frac:4.0%} "
        f"{market[:9]:<9} {float(job.get('cost', 0.0)):8.2f} {int(job.get('preemptions', 0)):>3} "
        f"{int(job.get('checkpoints', 0)):>4}  {_deadline_cell(job, now)}"
    )
    if width is not None:  # never wrap: a wrapped line breaks the in-place redraw
        room = max(0, width - len(head) - len(cell))
        rest = rest[:room]
        if room == 0:
            cell = cell[: max(0, width - len(head))]
            head = head[:width]
    if color and state in _COLORS and cell:
        cell = f"{_COLORS[state]}{cell}{_RESET}"
    return head + cell + rest


HEADER = (
    f"{'job':<22} {'tenant':<8} {'kind':<8} {'state':<13} {'progress':<{BAR_WIDTH}} {'':>4} "
    f"{'market':<9} {'cost $':>8} {'pre':>3} {'ckpt':>4}  deadline"
)


class LiveTable:
    """Redraws the job table in place on a TTY; prints state changes as lines elsewhere."""

    def __init__(self, out: TextIO | None = None, *, tty: bool | None = None,
                 summary_every: float = 10.0, max_rows: int = 40) -> None:
        self.out = out or sys.stdout
        self.tty = self.out.isatty() if tty is None else tty
        self.summary_every = summary_every
        self.max_rows = max_rows
        self._drawn = 0
        self._states: dict[str, str] = {}
        self._last_summary: float | None = None

    def update(self, jobs: Sequence[Mapping[str, Any]], now: float, *,
               tenants: Mapping[str, str] | None = None, footer: str = "",
               wall: float = 0.0) -> None:
        """Show ``jobs`` at control-plane time ``now`` (``wall``: seconds since start, for pacing)."""
        names = tenants or {}
        if self.tty:
            self._redraw(jobs, now, names, footer)
        else:
            self._lines(jobs, now, names, footer, wall)

    def _redraw(self, jobs: Sequence[Mapping[str, Any]], now: float, names: Mapping[str, str],
                footer: str) -> None:
        size = shutil.get_terminal_size((160, 50))
        width = max(20, size.columns - 1)
        rows = [f"t = {now / HOUR:7.2f} h   {footer}"[:width], HEADER[:width]]
        active = [j for j in jobs if j.get("state") not in ("SUCCEEDED", "FAILED", "CANCELLED")]
        done = [j for j in jobs if j not in active]
        shown = (active + done)[: max(1, min(self.max_rows, size.lines - 4))]
        rows += [job_row(j, now, names.get(str(j.get("tenant_id")), "?"), ascii_only=False,
                         color=True, width=width) for j in shown]
        if len(jobs) > len(shown):
            rows.append(f"... and {len(jobs) - len(shown)} more")
        buf = []
        if self._drawn:
            buf.append(f"\x1b[{self._drawn}F\x1b[J")
        buf.append("\n".join(rows) + "\n")
        self.out.write("".join(buf))
        self.out.flush()
        self._drawn = len(rows)

    def _lines(self, jobs: Sequence[Mapping[str, Any]], now: float, names: Mapping[str, str],
               footer: str, wall: float) -> None:
        for j in jobs:
            jid, state = str(j.get("id")), str(j.get("state"))
            if self._states.get(jid) != state:
                self._states[jid] = state
                tenant = names.get(str(j.get("tenant_id")), "?")
                self.out.write(f"[t={now / HOUR:7.2f}h] {j.get('name')} ({tenant}, {j.get('kind')}) "
                               f"-> {state} {float(j.get('progress_fraction', 0.0)):.0%}\n")
        if self._last_summary is None or wall - self._last_summary >= self.summary_every:
            self._last_summary = wall
            running = sum(1 for j in jobs if j.get("state") == "RUNNING")
            done = sum(1 for j in jobs if j.get("state") == "SUCCEEDED")
            self.out.write(f"[t={now / HOUR:7.2f}h] {running} running, {done}/{len(jobs)} done {footer}\n")
        self.out.flush()

    def final(self, jobs: Sequence[Mapping[str, Any]], now: float, *,
              tenants: Mapping[str, str] | None = None, footer: str = "") -> None:
        """Draw the last state once more (always as a full table)."""
        if self.tty:
            self._redraw(jobs, now, tenants or {}, footer)
            return
        names = tenants or {}
        self.out.write(HEADER + "\n")
        for j in jobs:
            self.out.write(job_row(j, now, names.get(str(j.get("tenant_id")), "?"), ascii_only=True,
                                   color=False) + "\n")
        self.out.flush()
