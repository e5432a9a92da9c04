"""How fast a control-plane actor answers on a machine kept busy by other processes, with its Ray
workers at Ray's default niceness (15) and at the control plane's (0, ``actors.raylocal``).

``python -m benchmarks.priority [--busy N] [--calls N] [--json]``

Each arm starts its own local Ray, ``--busy`` processes spinning at this process's priority (by
default one per core: the machine is saturated), and one actor whose call does 20 ms of CPU work
(about a controller tick of a small fleet). It times ``--calls`` calls, one every 0.2 s, and
reports their p50 / p99 wall time. Progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from typing import Any

import numpy as np

from actors.raylocal import init_local_ray
from benchmarks import entry

WORK_S = 0.02  # CPU seconds of one call
TARGET_P99_S = 1.0  # a tick that must not stall behind other work


def _spin() -> None:
    while True:
        pass


class Tick:
    """An actor whose call is :data:`WORK_S` of CPU work."""

    def work(self) -> float:
        """Spin for :data:`WORK_S` of this process's CPU time; the wall time it took."""
        t0, c0 = time.perf_counter(), time.process_time()
        while time.process_time() - c0 < WORK_S:
            pass
        return time.perf_counter() - t0

    def nice(self) -> int:
        return os.nice(0)


def arm(control_plane: bool, busy: int, calls: int) -> dict[str, Any]:
    """One arm: a fresh Ray, ``busy`` spinners, ``calls`` timed actor calls."""
    import ray

    init_local_ray(control_plane=control_plane, num_cpus=1, include_dashboard=False,
                   log_to_driver=False, configure_logging=False)
    spinners = [mp.Process(target=_spin, daemon=True) for _ in range(busy)]
    try:
        actor: Any = ray.remote(num_cpus=0)(Tick).remote()
        nice = ray.get(actor.nice.remote(), timeout=300)
        for s in spinners:
            s.start()
        times = []
        for i in range(calls):
            t0 = time.perf_counter()
            ray.get(actor.work.remote(), timeout=600)
            times.append(time.perf_counter() - t0)
            if (i + 1) % 25 == 0:
                print(f"priority: {'control plane' if control_plane else 'ray default'} "
                      f"{i + 1}/{calls}", file=sys.stderr)
            time.sleep(0.2)
    finally:
        for s in spinners:
            s.kill()
        ray.shutdown()
    t = np.asarray(times)
    return {"worker_nice": nice, "p50_s": round(float(np.percentile(t, 50)), 4),
            "p99_s": round(float(np.percentile(t, 99)), 4), "max_s": round(float(t.max()), 4)}


@entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.priority",
                                 description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--busy", type=int, default=os.cpu_count() or 2, help="spinning processes")
    ap.add_argument("--calls", type=int, default=100, help="timed calls per arm")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    out: dict[str, Any] = {"busy": args.busy, "calls": args.calls, "work_s": WORK_S}
    out["ray_default"] = arm(False, args.busy, args.calls)
    out["control_plane"] = arm(True, args.busy, args.calls)
    out["ok"] = out["control_plane"]["p99_s"] < TARGET_P99_S
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{args.busy} busy processes; one actor call = {WORK_S * 1000:.0f} ms of CPU")
    print(f"{'workers at':<26}{'nice':>6}{'p50 s':>9}{'p99 s':>9}{'max s':>9}")
    for name in ("ray_default", "control_plane"):
        r = out[name]
        print(f"{name.replace('_', ' '):<26}{r['worker_nice']:>6}{r['p50_s']:>9.3f}"
              f"{r['p99_s']:>9.3f}{r['max_s']:>9.3f}")
    print(f"control plane p99 < {TARGET_P99_S:.0f} s: {'ok' if out['ok'] else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
