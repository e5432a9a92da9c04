"""The API keeps the contract its OpenAPI states, checked without Ray on the real FastAPI app over
a real SQLite store (``tests.serve.bareapi``): a 405 names every method of the path."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.serve.bareapi import BareApi, bare_api


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BareApi]:
    with bare_api(tmp_path_factory.mktemp("contract")) as built:
        yield built


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("DELETE", "/v1/jobs", "GET, POST"),
    ("PUT", "/v1/tenants", "GET, POST"),
    ("OPTIONS", "/v1/tenants", "GET, POST"),
    ("DELETE", "/v1/packages/_ray_pkg_0123456789abcdef.zip", "GET, POST, PUT"),
    ("POST", "/v1/jobs/job-0123456789ab", "GET"),
    ("GET", "/v1/jobs/job-0123456789ab/cancel", "POST"),
    ("POST", "/api/jobs/job-0123456789ab", "DELETE, GET"),
])
def test_a_405_allows_every_method_of_the_path(api: BareApi, method: str, path: str,
                                               allow: str) -> None:
    with api.client(api.tenant_token) as http:
        r = http.request(method, path)
    assert r.status_code == 405, r.text
    assert r.headers["allow"] == allow
    assert r.json()["fix"] == "see the methods of this route at /docs"
