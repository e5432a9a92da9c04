"""Shared fixtures: the real datasets beside the repository, found like the CLI finds them."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusters.traces import DataCatalog
from controlplane.config import data_dir


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = data_dir()
    if not (root / "spot-traces").is_dir():
        pytest.fail(f"the public datasets are not in {root}: run `spotplane data fetch`")
    return root


@pytest.fixture(scope="session")
def catalog(data_root: Path) -> DataCatalog:
    return DataCatalog(data_root)
