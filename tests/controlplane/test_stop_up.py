"""The helper that stops a `spotplane up` under test leaks nothing of its process group, even when
`up` ignores its clean-stop signal (a fixture that failed half-way)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.support import stop_up

# a leader that ignores SIGTERM, with a child in its group (as Ray's GCS and raylet are in up's)
HUNG = "trap '' TERM; sleep 300 & echo $!; wait"


def test_a_hung_up_and_its_group_are_killed() -> None:
    proc = subprocess.Popen(["sh", "-c", HUNG], stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    assert os.getpgid(child) == proc.pid
    t0 = time.monotonic()
    stop_up(proc, timeout=1.0)
    assert proc.returncode is not None and time.monotonic() - t0 < 30
    for _ in range(100):  # the child is reparented and reaped by init: wait until it is gone
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
