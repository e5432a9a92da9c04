"""``spotplane clusters add | list | show | drain | remove``: the workload Ray clusters (admin)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from clusters.bootstrap import HeadPorts
from clusters.headlaunch import (
    HeadRequest,
    HeadWait,
    LaunchedHead,
    head_fleet,
    launch_head,
    removal_fleet,
)
from clusters.ray.multi import cluster_catalog
from controlplane.cli.control import _client_options, _print_json, _table, client_of
from controlplane.core.errors import ConfigError, Conflict, InvalidInput

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
    add.add_argument("--gcs-address", default=None, help="HOST:PORT nodes join (not with --launch)")
    add.add_argument("--dashboard-url", default=None,
                     help="http://HOST:8265 (its job API; not with --launch)")
    add.add_argument("--token-ref", default=None,
                     help="file path or secret name holding the cluster's Ray token (never the token)")
    add.add_argument("--zone", dest="zones", action="append", default=[], help="a zone (repeat)")
    add.add_argument("--node-type", dest="node_types", action="append", default=[],
                     help="an instance type (repeat)")
    add.add_argument("--ray-config", default=None, metavar="FILE",
                     help="the YAML `ray up` started the cluster from: its autoscaler is asked for "
                          "nodes (--fleet ray-clusters); its zones and node types unless given")
    add.set_defaults(handler=cmd_add)
    add_launch_options(add)
    listing = verbs.add_parser("list", parents=[common], help="every cluster and its health")
    listing.set_defaults(handler=cmd_list)
    for verb, handler, text in (("show", cmd_show, "one cluster"),
                                ("drain", cmd_drain, "finish what runs, take nothing new"),
                                ("remove", cmd_remove, "forget a cluster")):
        p = verbs.add_parser(verb, parents=[common], help=text)
        p.add_argument("name")
        p.set_defaults(handler=handler)
        if verb == "remove":
            p.add_argument("--fleet-option", dest="fleet_options", action="append", default=[],
                           metavar="KEY=VALUE", help="a provider option to terminate a launched head with")


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
    if args.launch:
        return cmd_add_launched(args)
    if not args.gcs_address or not args.dashboard_url:
        raise InvalidInput("--gcs-address" if not args.gcs_address else "--dashboard-url",
                           "needed to register a running cluster",
                           fix="give both, or --launch to let spotplane start the head")
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
        terminate_launched_head(client.request("GET", f"{API}/{args.name}"),
                                fleet_options(args.fleet_options))
        client.request("DELETE", f"{API}/{args.name}")
    print(f"cluster {args.name} removed")
    return 0


# -- clusters add --launch: spotplane starts the region's head --------------------------------
def add_launch_options(add: argparse.ArgumentParser) -> None:
    """The flags of ``clusters add --launch``."""
    add.add_argument("--launch", action="store_true",
                     help="launch the head on one on-demand instance, then register it")
    add.add_argument("--fleet", choices=["aws", "gcp"], default=None,
                     help="the provider that launches the head (default: --cloud)")
    add.add_argument("--instance-type", default=None, help="the head's instance (machine) type")
    add.add_argument("--ray-port", type=int, default=6379, help="the head's GCS port")
    add.add_argument("--dashboard-port", type=int, default=8265, help="the head's dashboard port")
    add.add_argument("--boot-hook", default="", help="shell lines run before Ray starts (mounts, drivers)")
    add.add_argument("--launch-timeout", type=float, default=900.0,
                     help="seconds to wait for the head to answer")
    add.add_argument("--fleet-option", dest="fleet_options", action="append", default=[],
                     metavar="KEY=VALUE", help="a provider option (JSON value or text; repeat)")


def fleet_options(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` flags as provider options: a JSON value as parsed, anything else as text."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidInput("--fleet-option", f"{pair!r} is not KEY=VALUE",
                               fix="e.g. --fleet-option endpoint_url=https://ec2.example")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


def head_request(args: argparse.Namespace) -> HeadRequest:
    """The head ``clusters add --launch`` asks for (its zone is the first ``--zone``)."""
    missing = [flag for flag, given in (("--zone", args.zones), ("--instance-type", args.instance_type),
                                        ("--token-ref", args.token_ref)) if not given]
    if missing:
        raise InvalidInput(missing[0], "needed with --launch",
                           fix="--launch --zone ZONE --instance-type TYPE --token-ref REF")
    if args.gcs_address or args.dashboard_url:
        raise InvalidInput("--gcs-address" if args.gcs_address else "--dashboard-url",
                           "given with --launch", fix="the launched head's address is registered")
    return HeadRequest(args.name, args.fleet or args.cloud, args.zones[0], args.instance_type,
                       args.token_ref, args.boot_hook, HeadPorts(args.ray_port, args.dashboard_port))


def launched_spec(args: argparse.Namespace, head: LaunchedHead) -> dict[str, Any]:
    """The registration of a launched head, as ``clusters add`` registers one by hand."""
    return {**spec_of(args), "gcs_address": head.gcs_address, "dashboard_url": head.dashboard_url,
            "head_instance_id": head.instance_id}


def cmd_add_launched(args: argparse.Namespace) -> int:
    """Launch the head, wait until it answers, register the cluster at its address."""
    request = head_request(args)
    with client_of(args) as client:
        known = client.request("GET", API)  # the API answers, the caller is the admin, the name is free
        if any(c.get("name") == request.name for c in known):
            raise Conflict(f"cluster {request.name} is already registered",
                           fix="pick another name, or clusters remove it first")
        fleet = head_fleet(request, fleet_options(args.fleet_options))
        head = launch_head(fleet, request, HeadWait(timeout_s=args.launch_timeout,
                                                    progress=lambda line: print(line, flush=True)))
        try:
            registered = client.request("POST", API, json_body=launched_spec(args, head))
        except Exception:
            fleet.terminate([head.instance_id])  # not registered: not left running and billed
            raise
        return _answer(args, registered)


def terminate_launched_head(cluster: dict[str, Any], options: dict[str, Any]) -> None:
    """Terminate the head spotplane launched for ``cluster`` (nothing for one added by hand)."""
    iid = cluster.get("head_instance_id")
    if not iid:
        return
    removal_fleet(cluster["cloud"], list(cluster.get("zones") or []), options).terminate([iid])
    print(f"terminated the head instance {iid} of cluster {cluster['name']}")
