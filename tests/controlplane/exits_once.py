"""A job that trains as ``examples/train_numpy.py`` does but, the first time it runs, checkpoints
at ``--exit-at`` and exits with ``--exit-code`` (a marker file remembers the first run); the
restarted attempt restores that checkpoint and finishes.

    python tests/controlplane/exits_once.py --steps 120 --seed 5 --exit-at 50 --marker /tmp/m
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

from controlplane import sdk

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "train_numpy.py"


def _train_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_numpy", TRAIN)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--exit-at", type=int, required=True)
    ap.add_argument("--exit-code", type=int, default=3)
    ap.add_argument("--marker", type=Path, required=True)
    ap.add_argument("--step-seconds", type=float, default=0.02)
    args = ap.parse_args()
    t = _train_module()
    with sdk.session() as s:
        state = s.restore() or t.fresh(args.seed)
        print(f"starting at step {int(state['step'])} of {args.steps}", flush=True)
        while state["step"] < args.steps:
            t.step(state, args.seed)
            time.sleep(args.step_seconds)
            s.progress(state["step"] / args.steps)
            if state["step"] == args.exit_at and not args.marker.exists():
                s.save(state, meta={"step": state["step"]})
                args.marker.write_text("exited once\n")
                print(f"exiting with code {args.exit_code} at step {state['step']}", flush=True)
                sys.stdout.flush()
                raise SystemExit(args.exit_code)
            if s.should_checkpoint():
                s.save(state, meta={"step": state["step"]})
        if s.last_saved is None or s.last_saved.progress < 1.0:
            s.save(state, meta={"step": state["step"], "final": True})
    print(f"done: step {state['step']} sha256 {t.digest(state)}", flush=True)


if __name__ == "__main__":
    main()
