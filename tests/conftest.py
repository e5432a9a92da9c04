"""Shared fixtures: the real datasets beside the repository, found like the CLI finds them."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from clusters.data.catalog import DataCatalog
from controlplane.core.config import data_dir
from tests import tickwatch
from tests.pgfixtures import pg_server, pg_url, store_url  # noqa: F401 - the store's backends
from tests.tickwatch import no_tick_failures  # noqa: F401 - autouse: no controller tick raised

# A suite started in the background of a script inherits SIGINT ignored, and so would every
# `spotplane up` it starts: the Ctrl-C tests would then signal a process that cannot hear them.
# The tests run as a terminal's foreground job would, with SIGINT handled.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config: pytest.Config) -> None:
    # before any Ray or `spotplane up` starts: they inherit where to record failed ticks
    tickwatch.start()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # a session-scoped controller may fail a tick after the last test's check
    late = tickwatch.leftover()
    if late:
        print(f"\n{len(late)} controller tick(s) raised after the last test:\n"
              f"{tickwatch.describe(late)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    tickwatch.stop()


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

    from actors.raylocal import init_local_ray

    if ray.is_initialized():
        ray.shutdown()
    for attempt in (1, 2, 3):  # Ray gives a raylet 30 s to register: a loaded machine misses it
        try:
            ctx = init_local_ray(
                control_plane=True,
                num_cpus=4,
                include_dashboard=True,
                namespace="spotplane-tests",
                log_to_driver=False,
                configure_logging=False,
            )
            break
        except Exception as e:
            ray.shutdown()
            if attempt == 3 or "timed out during startup" not in str(e):
                raise
    yield ctx
    try:
        from ray import serve

        serve.shutdown()
    except Exception:  # pragma: no cover - serve never started
        pass
    ray.shutdown()


@pytest.fixture(scope="session")
def workload_ray(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A second real local Ray for tenants' jobs (``actors.raylocal.WorkloadRay``: started
    with a scrubbed environment in its sandbox, 4 ``spotplane_slot`` resources), beside the control plane's
    ``ray_cluster``. One per session: each Ray costs 10-20 s to start. Yields its
    ``WorkloadAddress``; the ``SPOTPLANE_ADMIN_TOKEN`` set while it starts must not reach it."""
    import os

    from actors.raylocal import WorkloadRay
    from actors.sandbox import Sandbox

    saved = os.environ.get("SPOTPLANE_ADMIN_TOKEN")
    os.environ["SPOTPLANE_ADMIN_TOKEN"] = WORKLOAD_PARENT_SECRET
    # in the sandbox, as the test's own user: the tests' artifact directories (under pytest's
    # base temp dir, made after it starts) are the only place of this machine's it can write
    sandbox = Sandbox.for_workload(writable=[tmp_path_factory.getbasetemp()])
    try:
        workload = WorkloadRay(4, num_cpus=2, home=tmp_path_factory.mktemp("workload-home"),
                               sandbox=sandbox)
    finally:
        if saved is None:
            os.environ.pop("SPOTPLANE_ADMIN_TOKEN", None)
        else:
            os.environ["SPOTPLANE_ADMIN_TOKEN"] = saved
    yield workload.address
    workload.stop()


WORKLOAD_PARENT_SECRET = "spa_parent-secret-that-must-not-leak"
