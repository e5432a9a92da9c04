"""``spotplane budget`` (an admin sets a tenant's spend limits; anyone sees spend and headroom)
and ``spotplane bills`` (every job's bill, or per tenant and month, as a table, JSON or CSV)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from controlplane.cli.control import _client_options as client_options
from controlplane.cli.control import _table as table
from controlplane.cli.control import client_of, print_spend
from controlplane.core.bills import DOLLAR_LINES


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    common = client_options()
    budget = sub.add_parser("budget", parents=[common],
                            help="a tenant's spend limits and headroom (setting them: admin)")
    budget.add_argument("tenant", nargs="?", default=None, help="tenant id or name (to set)")
    budget.add_argument("--hourly-cap", type=float, default=None, help="$/h over running nodes")
    budget.add_argument("--monthly", type=float, default=None, help="$ per UTC calendar month")
    budget.add_argument("--soft", type=float, default=0.8, help="soft line, fraction of each cap")
    budget.add_argument("--protected", choices=("finish", "stop"), default="finish",
                        help="HP and deadline jobs at the monthly hard line")
    budget.set_defaults(handler=cmd_budget)
    bills = sub.add_parser("bills", parents=[common],
                           help="every job's bill, or per tenant and month (--per tenant)")
    bills.add_argument("--month", default=None, help="YYYY-MM (default: every month)")
    bills.add_argument("--per", choices=("job", "tenant"), default="job")
    bills.add_argument("--csv", action="store_true", help="CSV for a spreadsheet")
    bills.set_defaults(handler=cmd_bills)


def cmd_budget(args: argparse.Namespace) -> int:
    """Set a tenant's limits (with a tenant and a limit), then show every visible budget."""
    with client_of(args) as client:
        if args.tenant is not None:
            client.set_budget(args.tenant, {"hourly_cap": args.hourly_cap,
                                            "monthly_budget": args.monthly,
                                            "soft_fraction": args.soft,
                                            "protected": args.protected})
        if args.json:
            print(json.dumps(client.budgets(), indent=2))
            return 0
        print_spend(client)
    return 0


def cmd_bills(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        if args.csv:
            print(client.bills(month=args.month, per=args.per, fmt="csv"), end="")
            return 0
        rows: list[dict[str, Any]] = client.bills(month=args.month, per=args.per)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table([[b["month"], b.get("job_name") or b["tenant_id"], *[f"{b['lines'][k]:.2f}"
                                                             for k in DOLLAR_LINES],
            f"{b['total']:.2f}"] for b in rows],
          ["month", "job" if args.per == "job" else "tenant", *DOLLAR_LINES, "total $"])
    return 0
