"""The controller lease on both real stores (SQLite and PostgreSQL): a holder and an expiry beside the fencing epoch."""

from __future__ import annotations

import time

import pytest

from controlplane.core.errors import Conflict
from controlplane.store import Store


def test_a_live_lease_is_refused_to_another_holder_and_an_expired_one_is_taken(store_url: str) -> None:
    store = Store(store_url)
    first = store.claim_controller_lease("a", 10.0, now=100.0)
    assert first == 1
    assert store.claim_controller_lease("b", 10.0, now=109.9) is None  # a's lease runs to 110
    assert {k: v for k, v in store.controller_lease().items() if k != "now"} == {
        "epoch": 1, "holder": "a", "until": 110.0}
    assert store.renew_controller_lease("a", 1, 10.0, now=109.0) == 119.0
    assert store.claim_controller_lease("b", 10.0, now=118.0) is None
    second = store.claim_controller_lease("b", 10.0, now=119.5)  # a stopped renewing
    assert second == 2
    with pytest.raises(Conflict, match="taken by b"):
        store.renew_controller_lease("a", 1, 10.0, now=120.0)
    with pytest.raises(Conflict, match="epoch 1 is fenced by epoch 2"):
        store.commit(epoch=1)
    store.commit(epoch=2)  # the new holder's commits go through


def test_force_takes_a_live_lease_and_the_legacy_take_fences_the_holder(store_url: str) -> None:
    store = Store(store_url)
    assert store.claim_controller_lease("a", 10.0, now=0.0) == 1
    assert store.claim_controller_lease("b", 10.0, force=True, now=1.0) == 2
    assert store.take_controller_lease() == 3
    with pytest.raises(Conflict):
        store.renew_controller_lease("b", 2, 10.0, now=2.0)


def test_the_first_fencing_epoch_of_a_new_store_is_1(store_url: str) -> None:
    store = Store(store_url)
    assert store.take_controller_lease() == 1
    assert store.take_controller_lease() == 2


def test_the_lease_runs_on_the_databases_clock_not_the_claimers(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A standby whose clock runs an hour ahead must not take a live lease: expiry and
    claims are read on the database's clock, one clock for every machine sharing the store."""
    store = Store(store_url)
    before = time.time()
    assert store.claim_controller_lease("a", 30.0) == 1
    lease = store.controller_lease()
    assert before - 5 < lease["now"] < time.time() + 5  # the same machine: the clocks agree
    assert lease["until"] == pytest.approx(lease["now"] + 30.0, abs=5)
    monkeypatch.setattr(time, "time", lambda: before + 3600.0)  # the standby's skewed clock
    assert store.claim_controller_lease("b", 30.0) is None
    assert store.controller_lease()["now"] < before + 60  # not the skewed clock either
    until = store.renew_controller_lease("a", 1, 30.0)
    assert until < before + 120
    assert store.claim_controller_lease("b", 30.0, now=until + 0.1) == 2  # once truly expired
