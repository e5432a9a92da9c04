"""Benchmarks: ``python -m benchmarks.NAME`` prints a table; ``--json`` prints one JSON object.

Every benchmark's ``main`` is wrapped by :func:`entry`: input it cannot use (a damaged dataset, a
pod list that cannot be replayed, a run that did no work) prints one line on stderr and exits 2.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, ParamSpec

from controlplane.core.errors import SpotplaneError

P = ParamSpec("P")


def entry(main: Callable[P, int]) -> Callable[P, int]:
    """Wrap a benchmark's ``main``: a :class:`SpotplaneError` becomes one stderr line and its exit code."""

    @functools.wraps(main)
    def run(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except SpotplaneError as exc:
            print(f"{_prog(main)}: error: {exc}", file=sys.stderr)
            return exc.exit_code

    return run


def _prog(main: Callable[..., int]) -> str:
    """``python -m benchmarks.NAME``, also when the module runs as ``__main__``."""
    module = sys.modules.get(main.__module__)
    spec = getattr(module, "__spec__", None)
    return f"python -m {spec.name if spec is not None else main.__module__}"


def report(result: dict[str, Any], *, as_json: bool, table: Callable[[dict[str, Any]], str],
           plot_to: str | None = None, plot: Callable[[dict[str, Any], str], None] | None = None) -> int:
    """Print a benchmark's result: one JSON line with ``as_json``, else its table; draw its
    picture to ``plot_to`` first when asked. Returns the exit code (0)."""
    if plot_to and plot is not None:
        plot(result, plot_to)
    if as_json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        print(table(result))
    return 0
