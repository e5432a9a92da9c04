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


@pytest.fixture(scope="session")
def ray_cluster():  # type: ignore[no-untyped-def]
    """One real local Ray for the whole session (dashboard on a free port, for job submission).

    Tests that need Ray take this fixture and are marked ``@pytest.mark.ray``; they must clean
    up the actors, Serve apps and jobs they create. Yields the ``ray.init`` context.
    """
    import ray

    from controlplane.raylocal import init_local_ray

    if ray.is_initialized():
        ray.shutdown()
    ctx = init_local_ray(
        num_cpus=4,
        include_dashboard=True,
        namespace="spotplane-tests",
        log_to_driver=False,
        configure_logging=False,
    )
    yield ctx
    try:
        from ray import serve

        serve.shutdown()
    except Exception:  # pragma: no cover - serve never started
        pass
    ray.shutdown()
