"""``spotplane data list`` and ``spotplane data fetch``."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from clusters import fetch
from clusters.data.catalog import DataCatalog
from controlplane.core.config import resolve_data_dir

if TYPE_CHECKING:
    from clusters.data.catalog import DatasetInfo


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    data = sub.add_parser("data", help="list or download the public datasets")
    dsub = data.add_subparsers(dest="data_command", metavar="ACTION")
    dsub.required = True

    ls = dsub.add_parser("list", help="datasets found, with tick counts and availability per trace")
    ls.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ls.set_defaults(handler=cmd_list)

    fetch = dsub.add_parser("fetch", help="download, verify and normalise the upstream datasets")
    fetch.add_argument("--if-missing", action="store_true", help="do nothing for datasets already present")
    fetch.add_argument("--dest", default=None, help="where to write (default: the data directory)")
    fetch.add_argument("--only", action="append", default=None, help="fetch only this dataset (repeatable)")
    fetch.add_argument(
        "--base-url", default=None, help="mirror to download from instead of raw.githubusercontent.com"
    )
    fetch.set_defaults(handler=cmd_fetch)


def cmd_list(args: argparse.Namespace) -> int:

    root, source = resolve_data_dir(args.data_dir)
    catalog = DataCatalog(root)
    infos = catalog.datasets()
    traces = catalog.readable_spot_traces()
    if args.json:
        print(
            json.dumps(
                {
                    "data_dir": str(root),
                    "source": source.value,
                    "datasets": [
                        {"name": i.name, "present": i.present, "path": str(i.path), "summary": i.summary,
                         "damaged": i.damaged}
                        for i in infos
                    ],
                    "traces": [
                        {
                            "name": t.name,
                            "kind": t.kind,
                            "nodes": t.nodes,
                            "ticks": t.n_ticks,
                            "gap_seconds": t.gap_seconds,
                            "availability": round(t.availability_fraction, 4),
                            "path": str(t.path.relative_to(root)) if t.path else None,
                        }
                        for t in traces
                    ],
                }
            )
        )
        return _exit_code(infos)
    print(f"data directory: {root}  ({source.value})\n")
    print(f"{'dataset':<18} {'status':<8} summary")
    for i in infos:
        status = "MISSING" if not i.present else "DAMAGED" if i.damaged else "ok"
        print(f"{i.name:<18} {status:<8} {i.damaged or i.summary}")
    if traces:
        print(f"\n{'trace':<62} {'kind':<12} {'nodes':>5} {'ticks':>6} {'gap s':>6} {'avail':>6}")
        for t in traces:
            rel = str(t.path.relative_to(root)) if t.path else t.name
            print(
                f"{rel:<62} {t.kind:<12} {t.nodes:>5} {t.n_ticks:>6} {t.gap_seconds:>6.0f} "
                f"{t.availability_fraction:>6.1%}"
            )
    missing = [i.name for i in infos if not i.present]
    if missing:
        print(f"\nmissing: {', '.join(missing)} — run `spotplane data fetch` to download them")
    damaged = [i.name for i in infos if i.damaged]
    if damaged:
        print(f"\ndamaged: {', '.join(damaged)} — re-run `spotplane data fetch` to replace them")
    return _exit_code(infos)


def _exit_code(infos: list[DatasetInfo]) -> int:
    """2 when a dataset is damaged (bad input for every command that reads it), else 0."""
    return 2 if any(i.damaged for i in infos) else 0


def cmd_fetch(args: argparse.Namespace) -> int:

    root, _ = resolve_data_dir(args.data_dir)
    dest = root if args.dest is None else args.dest
    report = fetch.fetch_all(dest, only=args.only, if_missing=args.if_missing, base_url=args.base_url)
    for line in report:
        print(line)
    return 0
