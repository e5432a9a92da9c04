"""``spotplane clusters add | list | show | drain | remove``: the workload Ray clusters (admin)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from clusters.ray.multi import cluster_catalog
from controlplane.cli.control import _client_options, _print_json, _table, client_of
from controlplane.core.errors import ConfigError

API = "/v1/clusters"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    common = _client_options()
    clusters = sub.add_parser("clusters", help="the workload Ray clusters jobs run on (admin)")
    verbs = clusters.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    add = verbs.add_parser("add", parents=[common], help="register a workload Ray cluster")
    add.add_argument("name")
    add.add_argument("--cloud", required=True, help="aws, gcp, local, ...")
    add.add_argument("--region", required=True)
    add.add_argument("--gcs-address", required=True, help="HOST:PORT nodes join")
    add.add_argument("--dashboard-url", required=True, help="http://HOST:8265 (its job API)")
    add.add_argument("--token-ref", default=None,
                     help="file path or secret name holding the cluster's Ray token (never the token)")
    add.add_argument("--zone", dest="zones", action="append", default=[], help="a zone (repeat)")
    add.add_argument("--node-type", dest="node_types", action="append", default=[],
                     help="an instance type (repeat)")
    add.add_argument("--ray-config", default=None, metavar="FILE",
                     help="the YAML `ray up` started the cluster from: its autoscaler is asked for "
                          "nodes (--fleet ray-clusters); its zones and node types unless given")
    add.set_defaults(handler=cmd_add)
    listing = verbs.add_parser("list", parents=[common], help="every cluster and its health")
    listing.set_defaults(handler=cmd_list)
    for verb, handler, text in (("show", cmd_show, "one cluster"),
                                ("drain", cmd_drain, "finish what runs, take nothing new"),
                                ("remove", cmd_remove, "forget a cluster")):
        p = verbs.add_parser(verb, parents=[common], help=text)
        p.add_argument("name")
        p.set_defaults(handler=handler)


def spec_of(args: argparse.Namespace) -> dict[str, Any]:
    """The registration body the flags describe."""
    spec = {"name": args.name, "cloud": args.cloud, "region": args.region,
            "gcs_address": args.gcs_address, "dashboard_url": args.dashboard_url,
            "token_ref": args.token_ref, "zones": args.zones, "node_types": args.node_types}
    ray_config = getattr(args, "ray_config", None)
    return spec if ray_config is None else ray_cluster_spec(spec, ray_config)


def ray_cluster_spec(spec: dict[str, Any], ray_config: str) -> dict[str, Any]:
    """``spec`` of a ``ray up`` cluster: its YAML's absolute path, and the zones (named in the
    cluster, as fleet ray-clusters names them) and node types of that YAML where none are given."""
    path = str(Path(ray_config).expanduser().resolve())
    catalog = cluster_catalog(spec["name"], path)
    zones = list(dict.fromkeys(t.zone for t in catalog.values()))
    strange = [z for z in spec["zones"] if z not in zones]
    if strange:
        raise ConfigError(f"--zone {strange[0]}: the fleet names the zones of {path} {', '.join(zones)}",
                          fix="drop --zone: --ray-config fills them in")
    return {**spec, "ray_config": path, "zones": spec["zones"] or zones,
            "node_types": spec["node_types"] or list(catalog)}


def _rows(clusters: list[dict[str, Any]]) -> None:
    _table([[c["name"], c["cloud"], c["region"], c["state"], str(c["nodes_alive"]),
             c["gcs_address"], c["health_message"] or "-"] for c in clusters],
           ["name", "cloud", "region", "state", "nodes", "gcs", "health"])


def _answer(args: argparse.Namespace, found: Any) -> int:
    if args.json:
        _print_json(found)
    else:
        _rows(found if isinstance(found, list) else [found])
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        return _answer(args, client.request("POST", API, json_body=spec_of(args)))


def cmd_list(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        return _answer(args, client.request("GET", API))


def cmd_show(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        return _answer(args, client.request("GET", f"{API}/{args.name}"))


def cmd_drain(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        return _answer(args, client.request("POST", f"{API}/{args.name}/drain"))


def cmd_remove(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        client.request("DELETE", f"{API}/{args.name}")
    print(f"cluster {args.name} removed")
    return 0
