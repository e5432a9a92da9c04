"""The API's FastAPI app without Ray: one :class:`~serve.app.SpotplaneAPI` replica object built
in this process over a real SQLite store, served to in-process ASGI clients (httpx, Starlette's
TestClient, schemathesis' ``from_asgi``).

Ray Serve's class-based view resolves each handler's ``self`` and the routers' service through
``serve.get_replica_context().servable_object``; :func:`bare_api` answers that call with the
object it built, for as long as it is open.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ray import serve
from starlette.testclient import TestClient

from serve.app import Gate, SpotplaneAPI, app
from serve.auth import hash_token
from serve.limits import ApiLimits

ADMIN_TOKEN = "spa_bare-admin-token"
UNTHROTTLED = ApiLimits(rate_per_s=1e6, burst=1_000_000, node_report_rate_per_s=1e6,
                        node_report_burst=1_000_000, node_client_rate_per_s=1e6,
                        node_client_burst=1_000_000)


@dataclass
class BareApi:
    """The app, its replica object and one tenant's token (``tenant``) beside the admin's."""

    app: Any
    replica: Any
    admin_token: str
    tenant_token: str
    tenant_id: str

    def client(self, token: str | None) -> TestClient:
        """An in-process client sending ``token`` as its bearer token (none when None)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return TestClient(self.app, headers=headers, raise_server_exceptions=False)


def _replica(db: Path, limits: ApiLimits, package_dir: Path) -> Any:
    """A :class:`SpotplaneAPI` object built by the user class's own ``__init__`` (Serve's
    ingress wrapper subclasses it; its start-up needs a replica)."""
    wrapper = SpotplaneAPI.func_or_class
    user_class = wrapper.__mro__[1]
    replica = user_class.__new__(user_class)
    user_class.__init__(replica, str(db), hash_token(ADMIN_TOKEN), limits.model_dump(),
                        str(package_dir))
    return replica


@contextlib.contextmanager
def bare_api(tmp: Path, limits: ApiLimits = UNTHROTTLED, tenant: str = "fuzz",
             max_gpus: int = 64) -> Iterator[BareApi]:
    """The API over a fresh SQLite store in ``tmp``, with one tenant ``tenant`` created."""
    replica = _replica(tmp / "spotplane.db", limits, tmp / "packages")
    context = types.SimpleNamespace(servable_object=replica,
                                    replica_id=types.SimpleNamespace(unique_id="bare"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(serve, "get_replica_context", lambda: context)
        try:
            with TestClient(app, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as admin:
                r = admin.post("/v1/tenants", json={"name": tenant, "max_gpus": max_gpus})
                assert r.status_code == 201, r.text
                body = r.json()
            yield BareApi(app, replica, ADMIN_TOKEN, body["token"], body["tenant"]["id"])
        finally:
            Gate.state = None
            replica.service.base_store.close()
