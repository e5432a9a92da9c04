"""The executor's one typed configuration: every option, its default, and its checks, in one place."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from controlplane.core.blobs import Blobs
from controlplane.core.clock import Clock, ManualClock
from controlplane.core.config import REPO_ROOT
from controlplane.core.errors import InvalidInput
from controlplane.core.units import HOUR

EXECUTOR_KINDS = ("ray", "simulated")
PIN_MODES = ("auto", "never")
GPU_MODES = ("auto", "always", "never")


@dataclass(frozen=True)
class ExecutorConfig:
    """How the executor reaches the workload cluster and runs replicas there (Ray pickles it
    into the controller actor: ``RuntimeSettings.executor_options``)."""

    kind: str = "ray"  # "ray", or "simulated" (progress on the clock, no workload cluster)
    workload_address: str | None = None  # the workload Ray's dashboard (never the control plane's)
    workload_gcs: str | None = None  # its GCS; None: this process's own Ray drives the actors
    workload_token_path: str | None = None  # that cluster's Ray auth token file
    artifact_uri: str | None = None  # a directory or s3://bucket/prefix
    s3_endpoint_url: str | None = None
    namespace: str = "spotplane"
    hours_per_second: float | None = None  # model hours per job second; None: see scale_on
    working_dir: str | None = None  # where entrypoints run; None: this repository
    python: str | None = None  # the interpreter of ``python`` entrypoints; None: this one
    pin: str = "auto"  # auto: pin replicas to their node's resource; never: do not pin
    gpus: str = "auto"  # auto: ask for GPUs when the workload Ray has any; always; never
    detached_actors: bool = False
    stop_timeout_s: float = 30.0  # wall seconds a stopped Ray job is waited for
    submit_timeout_s: float = 120.0  # wall seconds a gang's placement group may take
    submit_retry_s: float | None = None  # retrying a busy job agent; None: submit_timeout_s
    env: Mapping[str, str] = field(default_factory=dict)  # every replica's own variables
    package_dir: str | Blobs | None = None  # tenants' uploaded packages; None: none
    log_dir: str | Blobs | None = None  # copies of attempts' logs; None: not copied
    log_copy_s: float = 5.0  # wall seconds between two copies of a running attempt's logs

    def __post_init__(self) -> None:
        _check_choice("executor_options.kind", "executor", self.kind, EXECUTOR_KINDS)
        _check_choice("pin", "pin mode", self.pin, PIN_MODES)
        _check_choice("gpus", "GPU mode", self.gpus, GPU_MODES)

    @property
    def python_path(self) -> str:
        """The interpreter entrypoints run with: ``python``, else this process's."""
        return self.python or sys.executable

    @property
    def working_path(self) -> str:
        """The directory entrypoints run in: ``working_dir``, else this repository."""
        return self.working_dir or str(REPO_ROOT)

    @property
    def retry_s(self) -> float:
        """Wall seconds one submission retries a busy job agent."""
        return self.submit_timeout_s if self.submit_retry_s is None else self.submit_retry_s

    def scale_on(self, clock: Clock) -> float:
        """Model hours per job second: ``hours_per_second``, else a simulated clock's speed / HOUR
        (one job second is ``speed`` simulated seconds), else 1 / HOUR (real time)."""
        if self.hours_per_second is not None:
            return float(self.hours_per_second)
        speed = clock.speed if isinstance(clock, ManualClock) else 0.0
        return speed / HOUR if speed > 0 else 1 / HOUR


def _check_choice(field_name: str, what: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InvalidInput(field_name, f"unknown {what} {value!r}",
                           fix=f"use one of {', '.join(choices)}")
