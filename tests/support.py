"""Helpers shared by the test modules (imported as ``tests.support``; fixtures stay in conftest)."""

from __future__ import annotations

import importlib.util
import socket
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TRAIN_SCRIPT = REPO / "examples" / "train_numpy.py"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load_train() -> types.ModuleType:
    """``examples/train_numpy.py`` as a module (its ``fresh`` and ``step``)."""
    spec = importlib.util.spec_from_file_location("train_numpy", TRAIN_SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def train_reference(steps: int, seed: int) -> dict[str, Any]:
    """The weights ``train_numpy.py`` reaches after ``steps`` uninterrupted steps."""
    t = load_train()
    state = t.fresh(seed)
    for _ in range(steps):
        t.step(state, seed)
    return dict(state)
