"""The one executor factory, for the control plane and tests alike:
``RuntimeSettings(executor_factory="actors.execution:make_executor", executor_options=ExecutorConfig(...))``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from urllib.parse import urlparse

from actors.execution.config import ExecutorConfig
from actors.execution.executor import RayJobExecutor
from actors.simexecutor import SimulatedExecutor
from clusters.fleet import FleetProvider
from controlplane.core.blobs import Blobs
from controlplane.core.clock import Clock
from controlplane.core.config import load_settings
from controlplane.core.errors import InvalidInput
from controlplane.core.models import Node
from controlplane.reconcile.lifetimes import lifetime_models, planning_model
from controlplane.store import IN_STORE, LOGS, PACKAGES, Store, open_blobs
from policies.preemption import PreemptionModel

CONTROLLER_SUBMIT_RETRY_S = 5.0  # a tick waits this long on a busy job agent, then moves on

WORKLOAD_FIX = (
    "pass the workload Ray cluster's dashboard (executor_options.workload_address, "
    "`spotplane up --workload-address`, SPOTPLANE_WORKLOAD_ADDRESS); `spotplane up` starts a "
    "local one by default (docs/security.md)"
)


def make_executor(
    config: ExecutorConfig, *, clock: Clock, fleet: FleetProvider | None = None,
    namespace: str | None = None, store: Store | None = None,
) -> RayJobExecutor | SimulatedExecutor:
    """The executor ``config`` names, as the controller actor builds it (``namespace``: the
    control plane's, which its replicas' actors share; ``store``: the controller's).

    ``kind="simulated"``: a :class:`SimulatedExecutor`. ``kind="ray"``: a
    :class:`RayJobExecutor` on the workload Ray cluster ``workload_address`` (required, and
    refused when it is the control plane's own Ray), with these defaults: ``workload_gcs``
    ``<dashboard host>:6379``, ``artifact_uri`` ``<state_dir>/artifacts``, ``package_dir`` /
    ``log_dir`` ``<state_dir>/packages`` / ``logs`` or, given as ``"store"`` or by default with
    a PostgreSQL store, the ``store``'s blobs table (what every API replica reads), and a
    ``submit_retry_s`` of 5 s so a tick is never held long. The checkpoint actors plan with the
    model the loop's own checkpoint planner uses (``reconcile.lifetimes.planning_model``: the
    fleet's per-cloud models), else seed 001's GCE fit when no fleet is given.
    """
    model_factory = None if fleet is None else _every_node(planning_model(lifetime_models(fleet)))
    if config.kind == "simulated":
        return SimulatedExecutor(clock, model_factory=model_factory)
    dashboard = config.workload_address
    if not dashboard:
        raise InvalidInput("executor_options.workload_address", "is missing", fix=WORKLOAD_FIX)
    from ray._private.services import get_webui_url_from_internal_kv  # Ray's internals: on use

    own = get_webui_url_from_internal_kv()
    if own and _same_endpoint(str(own), dashboard):
        raise InvalidInput(
            "executor_options.workload_address",
            f"{dashboard} is the control plane's own Ray cluster: tenants' code there could "
            "reach the controller, the store and their secrets",
            fix=WORKLOAD_FIX,
        )
    state_dir = load_settings().state_dir
    resolved = replace(
        config,
        namespace=namespace or config.namespace,
        workload_gcs=config.workload_gcs or default_gcs(dashboard),
        artifact_uri=config.artifact_uri or str(state_dir / "artifacts"),
        hours_per_second=config.scale_on(clock),
        submit_retry_s=(CONTROLLER_SUBMIT_RETRY_S if config.submit_retry_s is None
                        else config.submit_retry_s),
        package_dir=_blob_home(config.package_dir, store, PACKAGES, str(state_dir / "packages")),
        log_dir=_blob_home(config.log_dir, store, LOGS, str(state_dir / "logs")),
    )
    return RayJobExecutor(resolved, clock=clock, model_factory=model_factory)


def _blob_home(given: str | Blobs | None, store: Store | None, namespace: str,
               default: str) -> str | Blobs:
    """Where the executor keeps one kind of blob: the store's table when ``given`` is
    ``"store"`` (or by default with a PostgreSQL store), else ``given``, else ``default``."""
    if store is not None and (given == IN_STORE or (given is None and store.backend == "postgresql")):
        return open_blobs(IN_STORE, store, namespace)
    return default if given is None else given


def default_gcs(dashboard_address: str) -> str:
    """Ray's default GCS address on the dashboard's host (``head:6379``)."""
    host = urlparse(dashboard_address if "://" in dashboard_address else f"http://{dashboard_address}")
    return f"{host.hostname}:6379"


def _same_endpoint(a: str, b: str) -> bool:
    def norm(x: str) -> str:
        return x.split("://", 1)[-1].rstrip("/").replace("localhost", "127.0.0.1")

    return norm(a) == norm(b)


def _every_node(model: PreemptionModel) -> Callable[[Node | None], PreemptionModel]:
    """A model factory that answers ``model`` for every node, as the loop's planner plans."""
    return lambda node: model
