"""``spotplane up``'s supervisor (``controlplane.cli.up.supervise``) with a stand-in child: a
supervisor killed outright (SIGKILL, nothing to forward a signal) still stops its child cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import signal, sys, time
    from pathlib import Path
    out = Path(sys.argv[1])
    def stop(signum, frame):
        out.write_text(f"stopped by signal {signum}")
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    out.write_text("running")
    time.sleep(120)
""")

SUPERVISOR = textwrap.dedent("""
    import os, sys
    from controlplane.cli.up import supervise
    sys.exit(supervise([sys.executable, sys.argv[1], sys.argv[2]], dict(os.environ)))
""")


def test_a_sigkilled_supervisor_stops_its_child_with_sigterm(tmp_path: Path) -> None:
    child, out = tmp_path / "child.py", tmp_path / "child.out"
    child.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    sup = subprocess.Popen([sys.executable, "-c", SUPERVISOR, str(child), str(out)], env=env,
                           cwd=ROOT, start_new_session=True)
    try:
        wait_until(lambda: out.exists() and out.read_text() == "running", 60, "the child to start")
        sup.send_signal(signal.SIGKILL)
        sup.wait(timeout=30)
        wait_until(lambda: out.read_text().startswith("stopped"), 30, "the child's clean stop")
        assert out.read_text() == f"stopped by signal {int(signal.SIGTERM)}"
    finally:
        if sup.poll() is None:
            sup.kill()
