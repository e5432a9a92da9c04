"""Download, verify and normalise the upstream datasets (bring-up placeholder; see issue 2)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from clusters.traces import DATASETS
from controlplane.errors import SpotplaneError


def fetch_all(
    dest: str | Path,
    *,
    only: Sequence[str] | None = None,
    if_missing: bool = False,
    base_url: str | None = None,
) -> list[str]:
    """Fetch every dataset (or ``only`` those) into ``dest``; returns one report line each."""
    root = Path(dest)
    lines = []
    for name in only or list(DATASETS):
        if (root / DATASETS[name]).exists() and if_missing:
            lines.append(f"{name}: present in {root}")
            continue
        raise SpotplaneError(f"{name}: downloading is not implemented yet", fix=f"copy it into {root}")
    return lines
