"""Every controller a test runs ends with no failed tick, checked by one autouse fixture.

A :class:`~actors.controller.ControllerActor` (in this process, in the session's Ray, in a
``spotplane up`` child, in a benchmark's) catches a tick that raised, logs it and goes on; it
also appends it to the directory ``$SPOTPLANE_TICK_FAILURES_DIR`` names
(:data:`controlplane.core.config.TICK_FAILURES_ENV`), and that record outlives the actor. The suite
points the variable at a directory of its own before any controller starts (:func:`start`, from
``pytest_configure``, so every Ray and every child process inherits it), and the autouse fixture
:func:`no_tick_failures` fails the test during which a failure was recorded, with the error and
its traceback. A test that provokes failures states how many, and what they say, with
``@pytest.mark.tick_failures(n, match=REGEX)``.

A controller kept by a module- or session-scoped fixture is checked too: a failure it records
fails the next check, that is the test that was running when it was recorded (or, between
tests, the next one); one recorded after the last test fails the session (:func:`leftover`). A test that runs the reconcile loop on a
thread of its own (``Controller.tick`` raises to its caller) records what it catches with
:func:`actors.controller.record_tick_failure`, and the same fixture fails it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.core.config import TICK_FAILURES_ENV

MARKER = "tick_failures"
_saved: list[str | None] = []
_checked: set[tuple[str, int]] = set()  # failures a test's check has seen (and judged)


def start() -> Path:
    """A fresh directory for the failed ticks of this process's controllers (and its children's)."""
    where = Path(tempfile.mkdtemp(prefix="spotplane-tick-failures-"))
    where.chmod(0o777)  # a controller running as another user (root's `up` drops none) writes too
    _saved.append(os.environ.get(TICK_FAILURES_ENV))
    os.environ[TICK_FAILURES_ENV] = str(where)
    return where


def stop() -> None:
    """Remove the directory :func:`start` made and put the variable back as it was."""
    where = os.environ.get(TICK_FAILURES_ENV)
    previous = _saved.pop() if _saved else None
    if previous is None:
        os.environ.pop(TICK_FAILURES_ENV, None)
    else:
        os.environ[TICK_FAILURES_ENV] = previous
    if where:
        shutil.rmtree(where, ignore_errors=True)


def recorded() -> dict[tuple[str, int], dict[str, Any]]:
    """Every failed tick recorded so far, by (holder, its count at that controller)."""
    where = os.environ.get(TICK_FAILURES_ENV)
    out: dict[tuple[str, int], dict[str, Any]] = {}
    if not where or not Path(where).is_dir():
        return out
    for path in sorted(Path(where).glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # a line being written right now: read next time
                continue
            out[(str(row["holder"]), int(row["n"]))] = row
    return out


def describe(rows: list[dict[str, Any]]) -> str:
    return "\n".join(f"- {r['holder']} epoch {r['epoch']} failure {r['n']}: {r['error']}\n"
                     f"{r['traceback']}" for r in rows)


@pytest.fixture(autouse=True)
def no_tick_failures(request: pytest.FixtureRequest) -> Iterator[None]:
    """After the test (and its function-scoped fixtures, which stop their controllers): no
    controller recorded a failed tick since the last test's check, or exactly the
    ``tick_failures`` marker's."""
    yield
    new = {key: row for key, row in recorded().items() if key not in _checked}
    _checked.update(new)
    rows = list(new.values())
    mark = request.node.get_closest_marker(MARKER)
    if mark is None:
        assert not rows, (f"{len(rows)} controller tick(s) raised during this test (or since the "
                          f"last test's check):\n{describe(rows)}")
        return
    want = int(mark.args[0]) if mark.args else int(mark.kwargs.get("count", 1))
    match = mark.kwargs.get("match")
    assert len(rows) == want, (f"expected {want} failed controller tick(s), recorded "
                               f"{len(rows)}:\n{describe(rows)}")
    if match is not None:
        wrong = [r for r in rows if not re.search(str(match), str(r["error"]))]
        assert not wrong, f"failed ticks that do not match {match!r}:\n{describe(wrong)}"


def leftover() -> list[dict[str, Any]]:
    """Failures no test's check has seen: recorded after the last one (at the session's end)."""
    return [row for key, row in recorded().items() if key not in _checked]
