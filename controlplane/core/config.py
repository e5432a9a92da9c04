"""spotplane's settings, resolved from flags, ``SPOTPLANE_*`` environment variables and defaults.

The data directory is found in this order: the ``--data-dir`` flag, ``SPOTPLANE_DATA_DIR``,
``../shared/data`` beside the repository root when it exists (developers and CI), and last the
user cache ``~/.cache/spotplane/data`` that ``spotplane data fetch`` fills.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from controlplane.core.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]  # controlplane/core/config.py -> the checkout
SHARED_DATA_DIR = REPO_ROOT.parent / "shared" / "data"
USER_CACHE_DATA_DIR = Path.home() / ".cache" / "spotplane" / "data"
#: A directory where every controller instance appends each tick that raised: one JSON line per
#: failure in ``<holder>.jsonl`` (``actors.controller.record_tick_failure``). Unset: no such
#: record, the counter in the controller's ``status()`` only. It outlives the instance (a killed
#: actor, a stopped ``up``), so whoever started controllers can count their failures afterwards
#: (the test suite does).
TICK_FAILURES_ENV = "SPOTPLANE_TICK_FAILURES_DIR"


class DataDirSource(StrEnum):
    """Where the data directory came from, for messages that say where we looked."""

    FLAG = "--data-dir"
    ENV = "SPOTPLANE_DATA_DIR"
    SHARED = "../shared/data beside the repository"
    CACHE = "user cache"


class Settings(BaseSettings):
    """Everything configurable about a spotplane process."""

    model_config = SettingsConfigDict(env_prefix="SPOTPLANE_", extra="ignore")

    data_dir: Path | None = Field(default=None, description="Where the normalised datasets live.")
    state_dir: Path = Field(
        default=Path.home() / ".local" / "state" / "spotplane",
        description="Where the SQLite store and artifacts live.",
    )
    port: int = Field(default=8000, ge=1, le=65535, description="Serve HTTP port.")
    log_level: str = Field(default="WARNING")
    # The HTTP API's limits (see serve.limits.ApiLimits and docs/controlplane.md).
    api_max_body_bytes: int = Field(default=1 << 20, ge=1024, description="Request body cap (413).")
    api_rate_per_s: float = Field(default=100.0, gt=0, description="Requests/s per tenant (429).")
    api_burst: int = Field(default=200, ge=1, description="Requests a tenant may send at once.")
    api_max_in_flight_per_tenant: int = Field(
        default=1, ge=1, le=56, description="Requests of one tenant answered at once per replica (429).")
    api_in_flight_wait_s: float = Field(
        default=0.5, ge=0, le=30, description="Seconds a request over it waits for a slot (then 429).")
    api_max_jobs_in_flight: int = Field(default=10_000, ge=1, description="Unfinished jobs per tenant.")
    api_max_bag_jobs: int = Field(default=1000, ge=1, le=10_000, description="Parameter sets per bag.")
    api_max_list_bytes: int = Field(default=4 << 20, ge=4096, description="Bytes of one list answer.")
    api_idempotency_ttl_s: float = Field(default=24 * 3600.0, gt=0,
                                         description="Seconds an Idempotency-Key's answer replays.")
    metrics_token: str | None = Field(default=None, description="Bearer token for /metrics (or admin).")
    tick_failures_dir: Path | None = Field(default=None, description=(
        "Where every controller appends each tick that raised (TICK_FAILURES_ENV)."))
    # `spotplane up` (each one's flag wins)
    db: str | None = Field(default=None, description="The store: a path, sqlite:///PATH or a PostgreSQL URL.")
    workload_address: str | None = Field(default=None, description="The operator's workload Ray's dashboard.")
    workload_gcs: str | None = Field(default=None, description="Its GCS address (host:port).")
    workload_token_path: str | None = Field(default=None, description="Its Ray auth token file.")
    public_api_url: str | None = Field(default=None, description=(
        "The API's URL as launched nodes reach it (--fleet aws|gcp): with it, every launched "
        "VM boots into its region's registered workload cluster and reports to this URL."))
    workload_user: str | None = Field(default=None, description="The OS account the local workload Ray runs as.")
    artifacts: str | None = Field(default=None, description="Where real jobs' checkpoints go (a path or s3://).")
    s3_endpoint: str | None = Field(default=None, description="An S3-compatible endpoint for the artifacts.")
    s3_endpoint_url: str | None = Field(default=None, description="The same, for stores opened by URL alone.")
    # the CLI's client commands (each one's flag wins)
    url: str | None = Field(default=None, description="The API's base URL.")
    token: str | None = Field(default=None, description="The bearer token the CLI sends.")
    # real fleets (each provider option wins); lists are comma-separated
    aws_zones: str | None = Field(default=None, description="AWS zones, comma-separated.")
    aws_instance_types: str | None = Field(default=None, description="AWS instance types, comma-separated.")
    aws_image_id: str | None = Field(default=None, description="The AMI spot instances boot.")
    gcp_zones: str | None = Field(default=None, description="GCP zones, comma-separated.")
    gcp_machine_types: str | None = Field(default=None, description="GCP machine types, comma-separated.")
    ray_config: str | None = Field(default=None, description="The `ray up` cluster config of --fleet ray.")
    node_cloud: str | None = Field(default=None, description="The cloud a Ray fleet's node agents watch.")
    # the rate of launched nodes' reports (/v1/nodes/*), bounded before their credential is checked
    api_node_report_rate_per_s: float = Field(default=0.1, gt=0, description="Node reports/s per instance id (429).")
    api_node_report_burst: int = Field(default=20, ge=1, description="Node reports one instance id may send at once.")
    api_node_client_rate_per_s: float = Field(default=5.0, gt=0, description="Node reports/s per client address (429).")
    api_node_client_burst: int = Field(default=100, ge=1, description="Node reports one client address may send at once.")


#: What each setting must hold, for the fix of a message about a bad environment variable.
SETTING_HINTS = {"data_dir": "a directory path", "state_dir": "a directory path",
                 "port": "a whole number in 1..65535", "log_level": "DEBUG, INFO, WARNING or ERROR"}


def load_settings() -> Settings:
    """The settings, or ConfigError (exit 2) naming the ``SPOTPLANE_*`` variable and what it must hold."""
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        name = f"SPOTPLANE_{field.upper()}"
        raise ConfigError(f"{name}: {first.get('input')!r} is not valid ({first['msg']})",
                          fix=f"set {name} to {SETTING_HINTS.get(field, 'a valid value')}, or unset it") from None


def comma_list(value: str | None) -> list[str]:
    """A comma-separated setting as a list (``us-east-1a,us-east-1b``); [] when unset."""
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def resolve_data_dir(flag: str | Path | None = None) -> tuple[Path, DataDirSource]:
    """The data directory and where it came from (flag, env, shared beside the repo, cache)."""
    if flag is not None:
        return Path(flag).expanduser(), DataDirSource.FLAG
    env = load_settings().data_dir
    if env is not None:
        return Path(env).expanduser(), DataDirSource.ENV
    if SHARED_DATA_DIR.is_dir():
        return SHARED_DATA_DIR, DataDirSource.SHARED
    return USER_CACHE_DATA_DIR, DataDirSource.CACHE


def data_dir(flag: str | Path | None = None) -> Path:
    """The data directory alone (see :func:`resolve_data_dir`)."""
    return resolve_data_dir(flag)[0]
