"""The API keeps the contract its OpenAPI states, checked without Ray on the real FastAPI app over
a real SQLite store (``tests.serve.bareapi``): a tenant is refused an admin route before its body
is read, the admin a tenant's route, a 405 names every method of the path, a package upload is a
zip by its media type, and the OpenAPI states the patterns the server checks by hand."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controlplane.core.inputs import printable_pattern
from controlplane.core.runtime_env import PACKAGE_NAME
from serve.schemas import ID_CURSOR, NUMBER_CURSOR
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


@pytest.mark.parametrize("body", [
    b'{"name": "mallory"}',  # valid: refused for who sends it
    b'{"name": 5, "max_gpus": "many", "extra": true}',  # invalid fields
    b'{"name": ',  # not JSON
    b"\xff\xfe",  # not UTF-8
    b"",  # no body
])
def test_a_tenant_posting_to_an_admin_route_gets_403_whatever_the_body(api: BareApi,
                                                                     body: bytes) -> None:
    with api.client(api.tenant_token) as http:
        r = http.post("/v1/tenants", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 403, r.text
    assert r.json() == {"message": "creating a tenant needs the admin token",
                        "fix": "use the admin token in the file `spotplane up` names (STATE/admin-token)", "errors": []}


def test_the_admin_posting_a_malformed_tenant_gets_the_422_that_names_the_field(
        api: BareApi) -> None:
    with api.client(api.admin_token) as http:
        r = http.post("/v1/tenants", json={"name": 5})
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "name"


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/v1/tenants/me"),
    ("GET", "/v1/packages/_ray_pkg_0123456789abcdef.zip"),
    ("PUT", "/v1/packages/_ray_pkg_0123456789abcdef.zip"),
])
def test_the_admin_is_refused_a_tenants_own_routes(api: BareApi, method: str, path: str) -> None:
    with api.client(api.admin_token) as http:
        r = http.request(method, path, content=b"PK\x05\x06" + bytes(18))
    assert r.status_code == 403, r.text
    assert "needs a tenant's token" in r.json()["message"]


@pytest.mark.parametrize(("content_type", "status"), [
    (None, 200), ("application/zip", 200), ("application/octet-stream", 200),
    ("text/plain", 415), ("application/json", 415)])
def test_a_package_upload_is_a_zip_by_its_media_type(api: BareApi, content_type: str | None,
                                                     status: int) -> None:
    empty_zip = b"PK\x05\x06" + bytes(18)
    headers = {"Content-Type": content_type} if content_type else {}
    with api.client(api.tenant_token) as http:
        r = http.put("/v1/packages/_ray_pkg_0123456789abcdef.zip", content=empty_zip,
                     headers=headers)
    assert r.status_code == status, r.text
    if status == 415:
        assert r.json()["fix"] == "send the zip as application/zip"


def test_the_openapi_states_the_servers_patterns(api: BareApi) -> None:
    """The constraints the server checks by hand are in the schema schemathesis reads."""
    with api.client(None) as http:
        spec = http.get("/openapi.json").json()
    params = {p["name"]: p["schema"] for p in spec["paths"]["/v1/jobs"]["get"]["parameters"]}
    assert params["after"]["anyOf"][0]["pattern"] == ID_CURSOR
    events = spec["paths"]["/v1/jobs/{job_id}/events"]["get"]["parameters"]
    assert {p["name"]: p["schema"] for p in events}["after"]["anyOf"][0]["pattern"] == NUMBER_CURSOR
    package = spec["paths"]["/v1/packages/{name}"]["put"]
    assert package["parameters"][0]["schema"]["pattern"] == PACKAGE_NAME
    assert list(package["requestBody"]["content"]) == ["application/zip"]
    job = spec["components"]["schemas"]["JobSpec"]
    assert job["properties"]["name"]["pattern"] == printable_pattern()
    assert job["allOf"][0]["if"]["properties"]["kind"] == {"const": "deadline"}
