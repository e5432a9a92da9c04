"""Fair share through the API: the admin sets weights and nominals; lines on /v1/fairshare and
/metrics, each tenant seeing only its own."""

from __future__ import annotations

import json
from pathlib import Path

from controlplane.reconcile.fairshare import META_KEY
from tests.serve.bareapi import bare_api


def test_the_admin_sets_a_share_and_tenants_read_their_lines(tmp_path: Path) -> None:
    with bare_api(tmp_path, tenant="team-a") as api:
        admin, tenant = api.client(api.admin_token), api.client(api.tenant_token)
        r = admin.post("/v1/fairshare", json={"tenant": "team-a", "weight": 2,
                                              "nominal_gpus": {"V100": 8}})
        assert r.status_code == 200, r.text
        assert r.json() == {"tenant_id": api.tenant_id, "weight": 2,
                            "nominal_gpus": {"V100": 8}}
        assert tenant.post("/v1/fairshare", json={"tenant": "team-a"}).status_code == 403
        bad = admin.post("/v1/fairshare", json={"tenant": "team-a", "weight": 0})
        assert bad.status_code == 422 and "weight" in bad.text
        store = api.replica.service.base_store
        assert store.tenant_shares()[api.tenant_id].nominal_gpus == {"V100": 8}
        line = {"weight": 2.0, "nominal_gpus": 8.0, "entitled_gpus": 12.0, "held_gpus": 12.0,
                "borrowed_gpus": 4.0, "lent_gpus": 0.0}
        other = dict(line, weight=1.0, held_gpus=0.0, entitled_gpus=0.0, borrowed_gpus=0.0,
                     lent_gpus=4.0)
        store.set_meta(META_KEY, json.dumps({"at": 0.0, "pools": {
            "V100": {api.tenant_id: line, "ten-other": other}}}))
        mine = tenant.get("/v1/fairshare").json()
        assert [(r["tenant"], r["pool"], r["borrowed_gpus"]) for r in mine] == [
            ("team-a", "V100", 4.0)]
        assert len(admin.get("/v1/fairshare").json()) == 2
        text = admin.get("/metrics").text
        assert 'spotplane_tenant_gpus_borrowed{pool="V100",tenant="team-a"} 4.0' in text
        assert 'spotplane_tenant_gpus_lent{pool="V100",tenant="ten-other"} 4.0' in text
        assert 'spotplane_tenant_gpus_entitled{pool="V100",tenant="team-a"} 12.0' in text
