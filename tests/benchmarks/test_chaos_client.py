"""The chaos benchmark's tenants retry like careful clients: the same submission under the same
``Idempotency-Key`` after no answer or a 5xx, never after a 4xx, and give up after a while."""

from __future__ import annotations

import httpx

from benchmarks.chaos import Load, post_until_answered


def client(answers: list[int | None], seen: list[tuple[str, bytes]]) -> httpx.Client:
    """A client whose server answers each try in turn: a status, or None for a dropped connection."""

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append((request.headers.get("Idempotency-Key", ""), request.content))
        status = answers.pop(0) if answers else 201
        if status is None:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(status, json={"id": "job-1"})

    return httpx.Client(base_url="http://api", transport=httpx.MockTransport(handle))


def test_a_submission_is_retried_under_one_key_until_it_is_answered() -> None:
    seen: list[tuple[str, bytes]] = []
    load = Load()
    with client([None, 503, None], seen) as c:
        r = post_until_answered(c, {"name": "a"}, "k-1", load)
    assert r is not None and r.status_code == 201
    assert [k for k, _ in seen] == ["k-1"] * 4 and len({b for _, b in seen}) == 1
    assert load.retries == 3
    assert load.errors == {"ConnectError": 2, "http_503": 1}


def test_a_refusal_is_an_answer_and_not_retried() -> None:
    seen: list[tuple[str, bytes]] = []
    load = Load()
    with client([422], seen) as c:
        r = post_until_answered(c, {"name": "a"}, "k-2", load)
    assert r is not None and r.status_code == 422 and len(seen) == 1 and load.retries == 0


def test_a_client_gives_up_when_the_api_stays_away() -> None:
    seen: list[tuple[str, bytes]] = []
    load = Load()
    with client([None] * 100, seen) as c:
        assert post_until_answered(c, {"name": "a"}, "k-3", load, retry_s=1.0) is None
    # tried, waited 0.5 s, tried, and the next wait (1 s) would pass the limit: no third try
    assert len(seen) == load.retries + 1 and load.retries == 1
