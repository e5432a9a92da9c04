"""A small deterministic numpy training job that survives preemptions through the spotplane SDK.

A two-layer MLP trained with SGD + momentum on a fixed synthetic regression task. Every step's
minibatch comes from ``default_rng([seed, step])``, so the run is a pure function of
(seed, steps): restoring (step, weights, momentum) from a checkpoint and continuing gives a final
state bit-identical to an uninterrupted run, however often the process is killed.

    python examples/train_numpy.py --steps 400 --step-seconds 0.02 --out final.npz

Outside spotplane it checkpoints to ./.spotplane/checkpoints (see ``controlplane.sdk``).
"""

from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path
from typing import Any

import numpy as np

from controlplane import sdk

DIM, HIDDEN, BATCH = 16, 32, 64


def fresh(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng([seed, 0xC0FFEE])
    return {
        "step": 0,
        "w1": rng.normal(0, 0.3, (DIM, HIDDEN)),
        "w2": rng.normal(0, 0.3, (HIDDEN, 1)),
        "v1": np.zeros((DIM, HIDDEN)),
        "v2": np.zeros((HIDDEN, 1)),
        "loss": float("nan"),
    }


def teacher(seed: int) -> np.ndarray:
    return np.random.default_rng([seed, 7]).normal(0, 1, (DIM, 1))


def step(state: dict[str, Any], seed: int, lr: float = 0.01, momentum: float = 0.9) -> None:
    """One SGD step on the minibatch of this step number (deterministic)."""
    rng = np.random.default_rng([seed, int(state["step"]) + 1])
    x = rng.normal(0, 1, (BATCH, DIM))
    y = np.tanh(x @ teacher(seed)) + 0.01 * rng.normal(0, 1, (BATCH, 1))
    h = np.tanh(x @ state["w1"])
    pred = h @ state["w2"]
    err = pred - y
    g2 = h.T @ err / BATCH
    g1 = x.T @ ((err @ state["w2"].T) * (1 - h**2)) / BATCH
    state["v1"] = momentum * state["v1"] - lr * g1
    state["v2"] = momentum * state["v2"] - lr * g2
    state["w1"] = state["w1"] + state["v1"]
    state["w2"] = state["w2"] + state["v2"]
    state["loss"] = float(np.mean(err**2))
    state["step"] = int(state["step"]) + 1


def digest(state: dict[str, Any]) -> str:
    h = hashlib.sha256()
    for k in ("w1", "w2", "v1", "v2"):
        h.update(np.ascontiguousarray(state[k]).tobytes())
    h.update(str(state["step"]).encode())
    return h.hexdigest()


def train(
    steps: int, seed: int, step_seconds: float = 0.0, save_seconds: float = 0.0
) -> dict[str, Any]:
    with sdk.session() as s:
        state = s.restore() or fresh(seed)
        start = int(state["step"])
        print(f"starting at step {start} of {steps}", flush=True)
        while state["step"] < steps:
            step(state, seed)
            if step_seconds > 0:
                time.sleep(step_seconds)
            s.progress(state["step"] / steps)
            if s.should_checkpoint():
                if save_seconds > 0:
                    time.sleep(save_seconds)  # a slow checkpoint (big model, slow storage)
                s.save(state, meta={"step": state["step"]})
        if s.last_saved is None or s.last_saved.progress < 1.0:
            s.save(state, meta={"step": state["step"], "final": True})
    return state


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--step-seconds", type=float, default=0.0, help="sleep per step (simulated GPU work)"
    )
    ap.add_argument(
        "--save-seconds", type=float, default=0.0, help="extra time each checkpoint takes"
    )
    ap.add_argument("--out", type=Path, default=None, help="write the final weights here (.npz)")
    args = ap.parse_args()
    state = train(args.steps, args.seed, args.step_seconds, args.save_seconds)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        np.savez(args.out, **{k: state[k] for k in ("w1", "w2", "v1", "v2")}, step=state["step"])
    print(f"done: step {state['step']} loss {state['loss']:.6f} sha256 {digest(state)}", flush=True)


if __name__ == "__main__":
    main()
