"""What the API's replicas share through the store, on both backends: the rate buckets (one
upsert per request, exact under concurrent takers from several handles) and the blobs table."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from controlplane.store import Store

RATE, BURST = 10.0, 5.0


@pytest.fixture
def stores(store_url: str) -> Iterator[list[Store]]:
    """Two handles on one store, as two replicas hold (SQLite file, then PostgreSQL)."""
    first = Store(store_url)
    second = Store(store_url, create=False)
    yield [first, second]
    second.close()
    first.close()


def test_a_bucket_allows_its_burst_then_refills_at_its_rate(stores: list[Store]) -> None:
    a, b = stores
    t = 1000.0
    waits = [(a if i % 2 else b).take_token("tenant:t1", RATE, BURST, t) for i in range(7)]
    assert waits[:5] == [0.0] * 5  # the burst, whichever handle takes
    assert waits[5] == pytest.approx(1 / RATE) and waits[6] == pytest.approx(1 / RATE)
    assert a.take_token("tenant:t1", RATE, BURST, t + 0.05) == pytest.approx(0.05)  # half a token
    assert b.take_token("tenant:t1", RATE, BURST, t + 0.1) == 0.0  # one whole token after 1/rate
    assert a.take_token("tenant:t2", RATE, BURST, t) == 0.0  # another tenant's bucket is full
    assert a.take_token("tenant:t1", RATE, BURST, t + 100.0) == 0.0
    taken = sum(a.take_token("tenant:t1", RATE, BURST, t + 100.0) == 0.0 for _ in range(10))
    assert taken == BURST - 1  # refilled up to the burst, never past it


def test_a_clock_behind_the_bucket_takes_no_tokens_from_it(stores: list[Store]) -> None:
    a, b = stores
    assert a.take_token("k", RATE, 1.0, 50.0) == 0.0
    assert b.take_token("k", RATE, 1.0, 40.0) == pytest.approx(1 / RATE)  # a replica's clock 10 s behind
    assert a.take_token("k", RATE, 1.0, 50.1) == 0.0  # the bucket kept its newest time


def test_concurrent_takers_on_two_handles_get_exactly_the_burst(stores: list[Store]) -> None:
    burst = 40.0

    def take(i: int) -> bool:
        return stores[i % 2].take_token("tenant:race", 1e-6, burst, 7.0) == 0.0

    with ThreadPoolExecutor(8) as pool:
        allowed = sum(pool.map(take, range(120)))
    assert allowed == burst


def test_blobs_are_kept_once_per_namespace_and_grow_only(stores: list[Store]) -> None:
    a, b = stores
    assert a.put_blob("packages", "t1/p.zip", b"zip-1") is True
    assert b.put_blob("packages", "t1/p.zip", b"zip-2!") is False  # content-addressed: kept once
    assert b.get_blob("packages", "t1/p.zip") == b"zip-1" and b.blob_size("packages", "t1/p.zip") == 5
    assert a.get_blob("logs", "t1/p.zip") is None and a.blob_size("logs", "t1/p.zip") is None
    assert a.put_blob("logs", "j/s.log", b"one\n", grow=True) is True
    assert b.put_blob("logs", "j/s.log", b"on", grow=True) is False  # a shorter never replaces
    assert b.put_blob("logs", "j/s.log", b"one\ntwo\n", grow=True) is True
    assert a.get_blob("logs", "j/s.log") == b"one\ntwo\n"
    data = bytes(range(256)) * 1000  # binary, 256 kB
    assert a.put_blob("packages", "t1/bin.zip", data) and b.get_blob("packages", "t1/bin.zip") == data
