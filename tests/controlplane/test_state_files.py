"""State files hold job env and token hashes: the store and the simulated fleet's database are
0600 (with their -wal/-shm files) in a 0700 state directory, however they were found."""

from __future__ import annotations

import stat
from pathlib import Path

from clusters.sim import SimulatedFleet
from controlplane.cli.up import private_dir
from controlplane.core.clock import SimClock
from controlplane.core.models import JobSpec
from controlplane.store import Store


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_store_creates_a_private_directory_and_private_files(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = Store(state / "spotplane.db")
    tenant, _ = store.create_tenant("acme")
    store.submit_job(tenant.id, JobSpec(name="j", compute_hours=1.0, env={"SECRET": "s3cr3t"}))
    assert _mode(state) == 0o700
    for name in ("spotplane.db", "spotplane.db-wal", "spotplane.db-shm"):
        assert _mode(state / name) == 0o600, name
    store.close()


def test_a_world_readable_store_is_made_private_on_open(tmp_path: Path) -> None:
    Store(tmp_path / "spotplane.db").close()
    (tmp_path / "spotplane.db").chmod(0o644)
    Store(tmp_path / "spotplane.db").close()
    assert _mode(tmp_path / "spotplane.db") == 0o600


def test_up_makes_an_existing_state_directory_private(tmp_path: Path) -> None:
    state = tmp_path / "open-state"
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    private_dir(state)
    assert _mode(state) == 0o700
    private_dir(tmp_path / "new" / "state")
    assert _mode(tmp_path / "new" / "state") == 0o700


def test_simulated_fleet_database_is_private(tmp_path: Path, data_root: Path) -> None:
    (tmp_path / "simfleet.db").touch(mode=0o644)
    (tmp_path / "simfleet.db").chmod(0o644)
    SimulatedFleet.from_options(clock=SimClock(), data_dir=data_root, seed=1, state_path=tmp_path / "simfleet.db")
    assert _mode(tmp_path / "simfleet.db") == 0o600
    assert _mode(tmp_path / "simfleet.db-wal") == 0o600
