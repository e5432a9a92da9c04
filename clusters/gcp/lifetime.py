"""How long a GCP Spot VM lives: a fitted lifetime model, ended at Google's 24 h stop."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypeVar

SPOT_MAX_HOURS = 24.0  # Google stops every Spot VM by then

M = TypeVar("M", bound=Any)


def spot_lifetimes(fitted: M) -> M:
    """``fitted`` (a dataclass model with a ``limit`` in hours) with its limit at most 24 h.

    Seed 001's GCE fit ends at 25 h on the data's clock (launch request to notice): a VM alive
    at 24 h is stopped then, the atom of the capped model.
    """
    if fitted.limit > SPOT_MAX_HOURS:
        return replace(fitted, limit=SPOT_MAX_HOURS)
    return fitted
