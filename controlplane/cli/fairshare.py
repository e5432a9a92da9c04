"""``spotplane fairshare``: each tenant's fair share per pool, and (admin) setting one.

    spotplane fairshare                                   # nominal, entitled, held, borrowed, lent
    spotplane fairshare --set team-a --weight 2 --nominal V100=8 --nominal H100=2
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from controlplane.cli.control import _client_options, client_of
from controlplane.client import API
from controlplane.core.errors import InvalidInput
from controlplane.core.models import TenantShareSpec


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("fairshare", parents=[_client_options()],
                       help="tenants' fair share per pool, or set one's weight and nominal GPUs")
    p.add_argument("--set", default=None, metavar="TENANT",
                   help="admin: set this tenant's (id or name) weight and nominal GPUs")
    p.add_argument("--weight", type=float, default=1.0, help="its weight beside other tenants")
    p.add_argument("--nominal", action="append", default=[], metavar="POOL=GPUS",
                   help="GPUs of a pool it is owed whenever it asks (repeat per pool)")
    p.set_defaults(handler=cmd_fairshare)


def nominal_of(pairs: list[str]) -> dict[str, int]:
    """``["V100=8", "H100=2"]`` -> ``{"V100": 8, "H100": 2}``."""
    out: dict[str, int] = {}
    for pair in pairs:
        pool, sep, gpus = pair.partition("=")
        if not sep or not pool or not gpus.strip().isdigit():
            raise InvalidInput("--nominal", f"{pair!r} is not POOL=GPUS",
                               fix="e.g. --nominal V100=8")
        out[pool] = int(gpus)
    return out


def cmd_fairshare(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        if args.set:
            spec = TenantShareSpec(weight=args.weight, nominal_gpus=nominal_of(args.nominal))
            body = {"tenant": args.set, **spec.model_dump()}
            share: dict[str, Any] = client.request("POST", f"{API}/fairshare", json_body=body)
            print(json.dumps(share, indent=2) if args.json else
                  f"tenant {share['tenant_id']}: weight {share['weight']:g}, nominal "
                  f"{share['nominal_gpus'] or 'the weight part of each pool'}")
            return 0
        lines: list[dict[str, Any]] = client.request("GET", f"{API}/fairshare")
    if args.json:
        print(json.dumps(lines, indent=2))
        return 0
    header = ["pool", "tenant", "weight", "nominal", "entitled", "held", "borrowed", "lent"]
    rows = [[r["pool"], r["tenant"], f"{r['weight']:g}"]
            + [f"{r[k]:.1f}" for k in ("nominal_gpus", "entitled_gpus", "held_gpus",
                                       "borrowed_gpus", "lent_gpus")] for r in lines]
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        print("  ".join(x.ljust(w) for x, w in zip(row, widths, strict=False)))
    if not rows:
        print("(no share lines published yet: the controller writes them every few ticks)")
    return 0
