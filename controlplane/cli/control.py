"""``spotplane up | submit | logs | jobs | status | cancel | fleet | cost | tenants | down``.

``up`` starts local Ray, the control plane's actors and the Serve API, prints the URL and the
admin token, and records both (mode 0600) in the state directory so the other commands find the
running API. Every other command is a plain HTTP client of that API (``--url``/``SPOTPLANE_URL``,
``--token``/``SPOTPLANE_TOKEN``, else what ``up`` recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from clusters.providers import provider_names
from controlplane.cli.live import HEADER, LiveTable, job_row
from controlplane.cli.packaging import upload_working_dir
from controlplane.cli.up import run_up
from controlplane.client import (
    ServerUnreachable,
    SpotplaneClient,
    clear_endpoint,
    load_admin_token,
    read_endpoint,
)
from controlplane.core.config import load_settings
from controlplane.core.errors import ConfigError, InvalidInput, NotFound
from controlplane.core.models import BagSpec, JobSpec
from controlplane.core.units import HOUR
from controlplane.reconcile.contracts import ZONE_OBSERVATIONS


# --------------------------------------------------------------------------------------------
# Registration
# --------------------------------------------------------------------------------------------
def _client_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--url", default=None, help="API base URL (default: $SPOTPLANE_URL, else what `up` recorded)")
    p.add_argument("--token", default=None, help="bearer token (default: $SPOTPLANE_TOKEN, else the admin token)")
    p.add_argument("--state-dir", default=None, help="state directory of `up` (default: $SPOTPLANE_STATE_DIR)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return p


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    common = _client_options()

    up = sub.add_parser("up", help="start Ray, the control plane and the HTTP API (and the demo)")
    up.add_argument("--demo", action="store_true", help="run the demo scenario through the API")
    up.add_argument("--speed", type=float, default=None,
                    help="simulated seconds per wall second (default: 3600 with --demo, else 60)")
    up.add_argument("--fleet", default="sim", choices=provider_names(), help="fleet provider")
    up.add_argument("--port", type=int, default=None, help="HTTP port (default: 8000, or a free one if taken)")
    up.add_argument("--host", default="127.0.0.1", help="HTTP host to bind")
    up.add_argument("--state-dir", default=None, help="where the store and artifacts live (kept across `up`s)")
    up.add_argument("--report-json", default=None, metavar="FILE",
                    help="with --demo: write the demo's report here and exit when it is done")
    up.add_argument("--plot", default=None, metavar="FILE.png",
                    help="with --demo: where to draw the fleet/decisions plot (default: STATE_DIR/demo.png)")
    up.add_argument("--fresh", action="store_true", help="start from an empty store (moves the old one aside)")
    up.add_argument("--db", default=None, metavar="URL",
                    help="the store: postgresql://USER:PASSWORD@HOST/DB, sqlite:///PATH or a path "
                         "(default: $SPOTPLANE_DB, else spotplane.db in the state directory; "
                         "docs/store.md)")
    up.add_argument("--standby", action="store_true",
                    help="run a standby controller that takes over (lease expiry) when the active one dies")
    up.add_argument("--lease-ttl", type=float, default=10.0, metavar="SECONDS",
                    help="wall seconds the controller's lease lasts unrenewed (default 10): a "
                         "standby takes over about this long after the active one dies")
    up.add_argument("--zone-observation", choices=ZONE_OBSERVATIONS, default="free",
                    help="how the controller knows each zone's spot availability: 'free' asks the "
                         "provider for every zone; 'evidence' learns it only from nodes, launches "
                         "and the probes deadline policies buy (docs/controlplane.md)")
    up.add_argument("--api-replicas", type=int, default=1, metavar="N",
                    help="Serve replicas of the HTTP API (default 1); each enforces 1/N of a tenant's rate")
    up.add_argument("--artifacts", default=None, metavar="URI",
                    help="where real jobs' checkpoints go: a directory or s3://bucket/prefix "
                         "(default: STATE_DIR/artifacts; env SPOTPLANE_ARTIFACTS)")
    up.add_argument("--s3-endpoint", default=None, metavar="URL",
                    help="with an s3:// --artifacts: a custom S3 endpoint (MinIO, moto); "
                         "env SPOTPLANE_S3_ENDPOINT")
    up.add_argument("--workload-address", default=None, metavar="URL",
                    help="dashboard of the Ray cluster tenants' jobs run on, never the control plane's "
                         "(default: a second local Ray; env SPOTPLANE_WORKLOAD_ADDRESS)")
    up.add_argument("--workload-gcs", default=None, metavar="HOST:PORT",
                    help="that cluster's GCS address (default: its dashboard host:6379; env SPOTPLANE_WORKLOAD_GCS)")
    up.add_argument("--workload-token", default=None, metavar="FILE",
                    help="that cluster's Ray auth token file (env SPOTPLANE_WORKLOAD_TOKEN_PATH)")
    up.add_argument("--workload-user", default=None, metavar="USER",
                    help="the OS user the local workload Ray (so every tenant job) runs as inside its "
                         "sandbox; needs root (default as root: spotplane-jobs, created if missing; "
                         "env SPOTPLANE_WORKLOAD_USER; docs/security.md)")
    up.add_argument("--unsafe-no-sandbox", action="store_true",
                    help="UNSAFE: run tenants' jobs without the sandbox, able to read this machine as "
                         "the control plane does (its admin token, store and Ray). Trusted tenants only")
    up.set_defaults(handler=cmd_up)

    submit = sub.add_parser("submit", parents=[common], help="submit jobs or a bag from a YAML file")
    submit.add_argument("file", help="YAML: one job, `jobs: [...]`, or `bag: {name, template, params}`")
    submit.add_argument("--tenant", default=None, help="admin only: submit for this tenant id")
    submit.add_argument("--working-dir", default=None, metavar="DIR",
                        help="your code: zipped as Ray does (.gitignore and --exclude respected), "
                             "uploaded once, run as every job's runtime_env.working_dir")
    submit.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                        help="leave files matching PATTERN out of --working-dir (repeatable)")
    submit.set_defaults(handler=cmd_submit)

    logs = sub.add_parser("logs", parents=[common], help="a job's logs, every attempt (-f follows)")
    logs.add_argument("job_id")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    logs.set_defaults(handler=cmd_logs)

    jobs = sub.add_parser("jobs", parents=[common], help="list jobs (a live table with --watch)")
    jobs.add_argument("--state", action="append", default=None, help="filter by state (repeatable)")
    jobs.add_argument("--kind", default=None, choices=["hp", "spot", "deadline"])
    jobs.add_argument("--tenant", default=None, help="admin only: one tenant's jobs")
    jobs.add_argument("--watch", action="store_true", help="redraw until every job has finished")
    jobs.add_argument("--interval", type=float, default=1.0, help="seconds between redraws")
    jobs.set_defaults(handler=cmd_jobs)

    status = sub.add_parser("status", parents=[common], help="one job: state, progress, events, decisions")
    status.add_argument("job", help="job id")
    status.set_defaults(handler=cmd_status)

    cancel = sub.add_parser("cancel", parents=[common], help="cancel a job")
    cancel.add_argument("job", help="job id")
    cancel.set_defaults(handler=cmd_cancel)

    fleet = sub.add_parser("fleet", parents=[common], help="nodes, zones, prices and spot availability")
    fleet.add_argument("--all", action="store_true", help="include nodes that are gone")
    fleet.set_defaults(handler=cmd_fleet)

    cost = sub.add_parser("cost", parents=[common], help="spend per tenant vs on-demand only")
    cost.set_defaults(handler=cmd_cost)

    tenants = sub.add_parser("tenants", parents=[common], help="list tenants, or create one (admin)")
    tenants.add_argument("--create", default=None, metavar="NAME", help="create a tenant and print its token")
    tenants.add_argument("--max-gpus", type=int, default=64)
    tenants.set_defaults(handler=cmd_tenants)

    down = sub.add_parser("down", parents=[common], help="stop the running `spotplane up` (state is kept)")
    down.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for it to stop")
    down.set_defaults(handler=cmd_down)


# --------------------------------------------------------------------------------------------
# Finding the API
# --------------------------------------------------------------------------------------------
def state_dir_of(flag: str | None) -> Path:
    """The state directory: ``--state-dir``, ``$SPOTPLANE_STATE_DIR``, or the default."""
    return Path(flag).expanduser() if flag else load_settings().state_dir.expanduser()


def client_of(args: argparse.Namespace) -> SpotplaneClient:
    """A client for the API named by the flags, the environment or what ``up`` recorded."""
    state_dir = state_dir_of(getattr(args, "state_dir", None))
    recorded = read_endpoint(state_dir) or {}
    url = args.url or load_settings().url or recorded.get("url")
    if not url:
        raise ServerUnreachable("(no URL)", "no running `spotplane up` recorded in the state directory")
    token = args.token or load_settings().token or (
        load_admin_token(state_dir) if recorded else None)
    return SpotplaneClient(str(url), token)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def _table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)))
    for r in rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=False)))


# --------------------------------------------------------------------------------------------
# Client commands
# --------------------------------------------------------------------------------------------
class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping (YAML keeps the last silently)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"key {key!r} appears twice", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)  # type: ignore[arg-type]


def load_submission(path: str | Path, package: Callable[[Path, list[str]], str] | None = None,
                    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Jobs and/or a bag from a YAML file: one job mapping, ``jobs: [...]``, or ``bag: {...}``.

    Every job and the bag are validated here, before anything is submitted, so a bad second job
    never leaves the first one submitted alone. A ``runtime_env.working_dir`` that is a local
    directory (relative to the file) becomes the URI ``package(dir, excludes)`` uploaded it as.
    """
    p = Path(path)
    if not p.is_file():
        raise NotFound(f"{p}: no such file", fix="give the path of a YAML job file")
    try:
        doc = yaml.load(p.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except UnicodeDecodeError as exc:
        raise InvalidInput("file", f"{p} is not UTF-8 text", fix="save the job file as UTF-8 YAML") from exc
    except yaml.YAMLError as exc:
        raise InvalidInput("file", f"{p} is not valid YAML ({_yaml_problem(exc)})", fix="fix the YAML syntax") from exc
    if not isinstance(doc, dict):
        raise InvalidInput("file", f"{p} must hold a mapping", fix="write `name: ...` or `jobs: [...]` or `bag: {...}`")
    if "bag" in doc or "jobs" in doc:
        extra = sorted(set(doc) - {"bag", "jobs"})
        if extra:
            raise InvalidInput(extra[0], f"unknown top-level key in {p}", fix="a file holds `jobs: [...]` and/or `bag: {...}`")
        jobs = doc.get("jobs") or []
        if not isinstance(jobs, list) or not all(isinstance(j, dict) for j in jobs):
            raise InvalidInput("jobs", "must be a list of job mappings", fix="write `jobs: [{name: ..., ...}]`")
        bag = doc.get("bag")
        if bag is not None and not isinstance(bag, dict):
            raise InvalidInput("bag", "must be a mapping", fix="write `bag: {name, template, params}`")
        for i, job in enumerate(jobs):
            _local_working_dir(job, p, package)
            _validate(JobSpec, job, f"jobs[{i}]", p)
        if bag is not None:
            _local_working_dir(bag.get("template"), p, package)
            _validate(BagSpec, bag, "bag", p)
        return list(jobs), bag
    _local_working_dir(doc, p, package)
    _validate(JobSpec, doc, "job", p)
    return [doc], None


def _local_working_dir(spec: Any, path: Path, package: Callable[[Path, list[str]], str] | None) -> None:
    """Replace a job's local ``runtime_env.working_dir`` by the URI of its uploaded package."""
    renv = spec.get("runtime_env") if isinstance(spec, dict) else None
    if package is None or not isinstance(renv, dict):
        return
    wd = renv.get("working_dir")
    if isinstance(wd, str) and "://" not in wd:
        renv["working_dir"] = package((path.parent / wd).resolve(), list(renv.get("excludes") or []))


def with_working_dir(spec: dict[str, Any], uri: str, excludes: list[str]) -> dict[str, Any]:
    """``spec`` running the package ``uri`` (``--working-dir``), its other runtime_env kept."""
    renv = dict(spec.get("runtime_env") or {})
    renv["working_dir"] = uri
    if excludes:
        renv["excludes"] = sorted({*renv.get("excludes", []), *excludes})
    return {**spec, "runtime_env": renv}


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line: where in the file and what is wrong (PyYAML's own text spans several lines)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem


def _validate(model: type[JobSpec] | type[BagSpec], spec: dict[str, Any], where: str, path: Path) -> None:
    """Refuse a job or bag the API would refuse, naming the entry and field of the file."""
    try:
        model.model_validate(spec)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise InvalidInput(f"{where}.{loc}" if loc else where, f"{msg} (in {path})",
                           fix="see the job fields in docs/controlplane.md") from None


def cmd_submit(args: argparse.Namespace) -> int:
    excludes = list(getattr(args, "exclude", []) or [])
    with client_of(args) as client:
        def package(directory: Path, more: list[str]) -> str:
            up = upload_working_dir(client, directory, [*excludes, *more])
            sent = f"uploaded {up.sent_bytes} bytes" if up.sent_bytes else "already uploaded"
            print(f"{directory}: {up.uri} ({sent})", file=sys.stderr)
            return up.uri

        jobs, bag = load_submission(args.file, package)
        if getattr(args, "working_dir", None):
            uri = package(Path(args.working_dir), [])
            jobs = [with_working_dir(j, uri, excludes) for j in jobs]
            if bag is not None:
                bag = {**bag, "template": with_working_dir(bag["template"], uri, excludes)}
        out: list[dict[str, Any]] = []
        params = {"tenant_id": args.tenant} if args.tenant else None
        for spec in jobs:
            out.append(client.request("POST", "/v1/jobs", json_body=spec, params=params))
        bag_out = None
        if bag is not None:
            bag_out = client.request("POST", "/v1/bags", json_body=bag, params=params)
    if args.json:
        _print_json({"jobs": out, "bag": bag_out})
        return 0
    for j in out:
        print(f"{j['id']}  {j['name']}  {j['kind']}  {j['state']}")
    if bag_out is not None:
        print(f"{bag_out['bag']['id']}  bag {bag_out['bag']['name']}: {len(bag_out['job_ids'])} jobs")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    """``spotplane logs JOB [-f]``: every attempt's output, each after its marker line."""
    with client_of(args) as client:
        if not args.follow:
            sys.stdout.write(client.logs(args.job_id))
            return 0
        job = client.follow_logs(args.job_id, lambda text: (sys.stdout.write(text), sys.stdout.flush()))
    return 0 if job["state"] == "SUCCEEDED" else 1


def cmd_jobs(args: argparse.Namespace) -> int:

    with client_of(args) as client:
        def fetch() -> list[dict[str, Any]]:
            rows: list[dict[str, Any]] = client.request(
                "GET", "/v1/jobs", params={"state": args.state, "kind": args.kind, "tenant_id": args.tenant})
            return rows

        names = _tenant_names(client)
        if args.json:
            _print_json(fetch())
            return 0
        if not args.watch:
            now = float(client.clock()["now"])

            print(HEADER)
            for j in fetch():
                print(job_row(j, now, names.get(j["tenant_id"], "?"), ascii_only=not sys.stdout.isatty(),
                              color=False))
            return 0
        table = LiveTable()
        t0 = time.monotonic()
        while True:
            jobs, now = fetch(), float(client.clock()["now"])
            table.update(jobs, now, tenants=names, wall=time.monotonic() - t0)
            if jobs and all(j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") for j in jobs):
                return 0
            time.sleep(args.interval)


def _tenant_names(client: SpotplaneClient) -> dict[str, str]:
    try:
        return {t["id"]: t["name"] for t in client.tenants()}
    except Exception:  # noqa: BLE001 - names are cosmetic
        return {}


def cmd_status(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        job = client.job(args.job)
        events = client.events(args.job)
        decisions = client.decisions(args.job)
        now = float(client.clock()["now"])
    if args.json:
        _print_json({"job": job, "events": events, "decisions": decisions})
        return 0
    spec = job["spec"]
    print(f"{job['id']}  {job['name']}  ({job['kind']}, tenant {job['tenant_id']})")
    print(f"  state        {job['state']}  {job.get('message', '')}")
    print(f"  progress     {job['progress_hours']:.2f} / {spec['compute_hours']:.2f} h "
          f"({job['progress_fraction']:.0%}), checkpointed {job['checkpointed_hours']:.2f} h")
    print(f"  gang         {spec['workers']} x {spec['gpus_per_worker']} GPU {spec.get('accelerator') or 'any'}"
          f"  on {job.get('market') or '-'} {job.get('zone') or ''}")
    if job.get("deadline_at") is not None:
        left = (job["deadline_at"] - now) / HOUR
        met = job.get("met_deadline")
        print(f"  deadline     {job['deadline_at'] / HOUR:.2f} h ({left:+.2f} h from now)"
              + ("" if met is None else f", met: {met}"))
    print(f"  cost         ${job['cost']:.2f} (on-demand only: ${job['on_demand_cost']:.2f})")
    print(f"  preemptions  {job['preemptions']}   checkpoints {job['checkpoints']}")
    print(f"\nevents ({len(events)}):")
    for e in events[-15:]:
        print(f"  {e['at'] / HOUR:8.2f}h  {e['kind']:<10} {e.get('src') or '':<13} -> {e.get('dst') or '':<13} {e['cause']}")
    if decisions:
        print(f"\nlast decisions ({len(decisions)}):")
        for d in decisions[-8:]:
            print(f"  {d['at'] / HOUR:8.2f}h  {d['policy']:<18} {d['action']:<10} {d.get('zone') or '':<24} {d['reason']}")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        job = client.cancel(args.job)
    if args.json:
        _print_json(job)
    else:
        print(f"{job['id']}: cancellation requested (state {job['state']}); the controller stops it on its next tick")
    return 0


def cmd_fleet(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        nodes = client.nodes(active_only=not args.all)
        prices = client.prices()
        avail = {(a["zone"], a["instance_type"]): a["spot_available"] for a in client.availability()}
    if args.json:
        _print_json({"nodes": nodes, "zones": prices, "availability": [
            {"zone": z, "instance_type": t, "spot_available": v} for (z, t), v in avail.items()]})
        return 0
    print(f"nodes ({len(nodes)}{'' if args.all else ' live'}):")
    _table([[n["id"], n["cloud"], n["zone"], n["instance_type"], n["market"], n["state"],
             f"{n['price_per_hour']:.2f}", n.get("job_id") or "-"] for n in nodes],
           ["node", "cloud", "zone", "type", "market", "state", "$/h", "job"])
    print(f"\nzones ({len(prices)}):")
    _table([[p["cloud"], p["zone"], p["instance_type"], p["accelerator"], f"{p['spot_price']:.2f}",
             f"{p['on_demand_price']:.2f}", f"{p['spot_discount_pct']:.0f}%",
             "yes" if avail.get((p["zone"], p["instance_type"])) else "no"] for p in prices],
           ["cloud", "zone", "type", "gpu", "spot $/h", "od $/h", "discount", "spot now"])
    return 0


def cmd_cost(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        report = client.cost()
    if args.json:
        _print_json(report)
        return 0
    _table([[t["tenant_name"], str(t["jobs"]), f"{t['gpu_hours']:.1f}", f"{t['cost']:.2f}",
             f"{t['on_demand_cost']:.2f}", f"{t['savings_pct']:.1f}%"] for t in report["tenants"]],
           ["tenant", "jobs", "GPU h", "cost $", "on-demand $", "savings"])
    print(f"\ntotal ${report['total_cost']:.2f} vs ${report['on_demand_cost']:.2f} on-demand only: "
          f"{report['savings_pct']:.1f}% saved")
    with client_of(args) as client:
        print_spend(client)
    return 0


def print_spend(client: SpotplaneClient) -> None:
    """Each visible tenant's spend this month and its headroom under its limits."""
    rows = client.budgets()
    if not rows:
        return

    def cap(value: float | None, unit: str = "") -> str:
        return "-" if value is None else f"{value:.2f}{unit}"

    print()
    _table([[r["tenant_id"], r["month"], f"{r['month_spend']:.2f}", cap(r["monthly_budget"]),
             cap(r["monthly_headroom"]), r["monthly_level"], f"{r['spend_rate']:.2f}",
             cap(r["hourly_cap"]), cap(r["hourly_headroom"]), r["hourly_level"]] for r in rows],
           ["tenant", "month", "spent $", "budget $", "headroom $", "line", "$/h", "cap $/h",
            "headroom $/h", "line"])


def cmd_tenants(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        if args.create:
            created = client.create_tenant(args.create, args.max_gpus)
            if args.json:
                _print_json(created)
            else:
                t = created["tenant"]
                print(f"tenant {t['name']} ({t['id']}), max {t['max_gpus']} GPUs")
                print(f"token (shown once): {created['token']}")
            return 0
        tenants = client.tenants()
    if args.json:
        _print_json(tenants)
    else:
        _table([[t["id"], t["name"], str(t["max_gpus"])] for t in tenants], ["id", "name", "max GPUs"])
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    state_dir = state_dir_of(args.state_dir)
    recorded = read_endpoint(state_dir)
    if not recorded or not recorded.get("pid"):
        print(f"no running `spotplane up` recorded in {state_dir}")
        return 0
    pid = int(recorded["pid"])
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:

        clear_endpoint(state_dir)
        print(f"`spotplane up` (pid {pid}) was not running; forgot its endpoint")
        return 0
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            print(f"stopped `spotplane up` (pid {pid}); state kept in {state_dir}")
            return 0
        time.sleep(0.5)
    raise ConfigError(f"`spotplane up` (pid {pid}) did not stop within {args.timeout:.0f} s",
                      fix=f"wait longer, or `kill -INT {pid}`")


def cmd_up(args: argparse.Namespace) -> int:

    return run_up(args)
