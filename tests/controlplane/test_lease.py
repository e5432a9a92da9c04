"""The controller lease on both real stores (SQLite and PostgreSQL): a holder and an expiry beside the fencing epoch."""

from __future__ import annotations

import pytest

from controlplane.core.errors import Conflict
from controlplane.store import Store


def test_a_live_lease_is_refused_to_another_holder_and_an_expired_one_is_taken(store_url: str) -> None:
    store = Store(store_url)
    first = store.claim_controller_lease("a", 10.0, now=100.0)
    assert first == 1
    assert store.claim_controller_lease("b", 10.0, now=109.9) is None  # a's lease runs to 110
    assert store.controller_lease() == {"epoch": 1, "holder": "a", "until": 110.0}
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
