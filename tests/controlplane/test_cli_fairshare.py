"""``spotplane fairshare``: its flags, the POOL=GPUS parser, and what it sends and prints."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.cli import fairshare
from controlplane.cli.main import build_parser
from controlplane.core.errors import InvalidInput


class FakeClient:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def request(self, method: str, path: str, *, json_body: Any = None) -> Any:
        self.sent.append((method, path, json_body))
        if method == "POST":
            return {"tenant_id": "ten-1", **json_body}
        return [{"pool": "V100", "tenant": "team-a", "tenant_id": "ten-1", "weight": 2.0,
                 "nominal_gpus": 8.0, "entitled_gpus": 12.0, "held_gpus": 12.0,
                 "borrowed_gpus": 4.0, "lent_gpus": 0.0}]


def test_fairshare_sets_and_shows(monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeClient()
    monkeypatch.setattr(fairshare, "client_of", lambda args: fake)
    args = build_parser().parse_args(["fairshare", "--set", "team-a", "--weight", "2",
                                      "--nominal", "V100=8"])
    assert args.handler(args) == 0
    assert fake.sent[-1] == ("POST", "/v1/fairshare",
                             {"tenant": "team-a", "weight": 2.0, "nominal_gpus": {"V100": 8}})
    args = build_parser().parse_args(["fairshare"])
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "team-a" in out and "borrowed" in out and "12.0" in out
    with pytest.raises(InvalidInput, match="--nominal"):
        fairshare.nominal_of(["V100:8"])
