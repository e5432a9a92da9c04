"""Serve's HTTP proxy on a busy machine: ``serve.start`` gives the proxy a fixed 60 s, and
:func:`serve.app.start_proxy` keeps waiting past it (the controller it started stays) up to its
own bound, then names the port and the cause."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from controlplane.core.errors import Unavailable
from serve import app
from tests.support import free_port


@pytest.mark.ray
def test_the_api_starts_past_serves_own_proxy_wait(ray_cluster, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                                   caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    from ray import serve
    from ray.serve._private import api as serve_api

    serve.shutdown()
    monkeypatch.setattr(serve_api, "HTTP_PROXY_TIMEOUT", 1e-6)  # Serve gives up at once, as a loaded machine makes it
    port = free_port()
    try:
        with caplog.at_level(logging.WARNING, logger="serve.app"):
            url = app.start_api(tmp_path / "spotplane.db", "spa_proxy-test-admin", port)
        assert f"proxy on 127.0.0.1:{port} is not up after Serve's own wait" in caplog.text
        assert httpx.get(f"{url}/healthz", timeout=5).json()["status"] == "ok"
    finally:
        app.stop_api()


def test_a_proxy_that_never_answers_is_named_with_its_port(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, object]] = []

    def serve_start(http_options: dict[str, object]) -> None:  # Serve's own wait ran out once
        calls.append(http_options)
        if len(calls) == 1:
            raise TimeoutError("HTTP proxies not available after 60s.")

    monkeypatch.setattr(app.serve, "start", serve_start)
    port = free_port()  # nothing listens there
    with pytest.raises(Unavailable, match=rf"proxy on 0\.0\.0\.0:{port} did not answer "
                                          rf"http://127\.0\.0\.1:{port}/-/healthz in 1 s — .*another --port"):
        app.start_proxy("0.0.0.0", port, wait_s=1.0)
    assert calls == [{"host": "0.0.0.0", "port": port}] * 2
