"""The BLAS a simulation's quota forecaster sums through, held to one thread.

The forecaster's fit (Eq. 8) multiplies its windows through BLAS (``policies.forecast``), and
OpenBLAS splits a product over its threads and picks its kernels by CPU: the same cell gives
other float rounding, so another quota and another run, under another thread count or on another
CPU. A benchmark cell runs its simulation on one BLAS thread, and names the BLAS build and CPU
kernel it ran on, so that two cells compare only where their rounding is the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import scipy.optimize  # noqa: F401  (loads scipy's own BLAS, which the forecaster's fit calls, before it is named)
from threadpoolctl import threadpool_info, threadpool_limits

#: The BLAS threads a benchmark simulation runs on.
SIM_BLAS_THREADS = 1


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Every BLAS library loaded in this process on :data:`SIM_BLAS_THREADS` thread, for the block."""
    with threadpool_limits(limits=SIM_BLAS_THREADS, user_api="blas"):
        yield


@cache
def blas_identity() -> tuple[str, ...]:
    """Each loaded BLAS as ``"<library> <version> <kernel>"`` (e.g. ``openblas 0.3.30 Haswell``), sorted."""
    return tuple(sorted({f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')}"
                         for i in threadpool_info() if i.get("user_api") == "blas"}))
