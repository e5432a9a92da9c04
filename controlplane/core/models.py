"""spotplane's domain: tenants, jobs (and their state machine), bags, nodes, events, decisions.

Pydantic models are what the store returns and what the API serialises. ``JobSpec`` / ``BagSpec``
are the validated *input* (nothing invalid reaches the store; the rules of free-form text are in
:mod:`controlplane.core.inputs`, a job's Ray ``runtime_env`` in :mod:`controlplane.core.runtime_env`);
``Job`` / ``Bag`` are the stored records. The API's other rows are in
:mod:`controlplane.core.readmodels`, tokens in :mod:`controlplane.core.tokens`. Times are
control-plane clock seconds (see ``controlplane.core.clock``) unless a field name says ``_hours``.
"""

from __future__ import annotations

import secrets
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, WithJsonSchema, model_validator

from controlplane.core.errors import Conflict
from controlplane.core.inputs import (
    MAX_DEADLINE_S,
    MAX_ENV_VALUE,
    MAX_ENV_VARS,
    Command,
    EnvKey,
    EnvValue,
    Name,
    StrictFloat,
    StrictInt,
    check_finite_tree,
    env_schema,
    params_schema,
)
from controlplane.core.runtime_env import MAX_METADATA, RuntimeEnv

_NOTHING: frozenset[str] = frozenset()  # an unchanged row's fields: one shared empty set


class Row(BaseModel):
    """A stored record that remembers which of its fields were assigned since the store last
    saw it: the reconcile loop saves exactly those rows, and nothing marks a change by hand.
    A row made here (``Row(...)``) is all new; one the store loads (``model_validate*``) is
    clean."""

    _assigned: set[str] = PrivateAttr(default_factory=set)

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        self._assigned.update(type(self).model_fields)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name in type(self).model_fields:
            self._assigned.add(name)

    @property
    def assigned(self) -> frozenset[str]:
        """The fields assigned since the last :meth:`mark_saved` (or since it was loaded)."""
        return frozenset(self._assigned) if self._assigned else _NOTHING

    def mark_saved(self) -> None:
        """The store now holds this row as it is."""
        self._assigned.clear()


# --------------------------------------------------------------------------------------------
# Enums and the job state machine
# --------------------------------------------------------------------------------------------
class JobKind(StrEnum):
    """How a job may be treated: ``hp`` is never preempted for others; ``spot`` may be; ``deadline``
    is driven by its deadline policy (spot / on-demand / idle) to finish by its deadline."""

    HP = "hp"
    SPOT = "spot"
    DEADLINE = "deadline"


class JobState(StrEnum):
    PENDING = "PENDING"  # accepted by the API, not yet seen by the controller
    QUEUED = "QUEUED"  # waiting for placement
    STARTING = "STARTING"  # nodes requested / provisioning
    RUNNING = "RUNNING"
    CHECKPOINTING = "CHECKPOINTING"
    PREEMPTED = "PREEMPTED"  # lost its nodes; goes back to QUEUED
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL_STATES: frozenset[JobState] = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
)
ACTIVE_STATES: frozenset[JobState] = frozenset(set(JobState) - TERMINAL_STATES)
_END = {JobState.FAILED, JobState.CANCELLED}

# Every legal move; anything else is refused by :func:`check_transition`.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.QUEUED, *_END}),
    JobState.QUEUED: frozenset({JobState.STARTING, *_END}),
    JobState.STARTING: frozenset({JobState.RUNNING, JobState.PREEMPTED, JobState.QUEUED, *_END}),
    JobState.RUNNING: frozenset(
        {JobState.CHECKPOINTING, JobState.PREEMPTED, JobState.QUEUED, JobState.SUCCEEDED, *_END}
    ),
    JobState.CHECKPOINTING: frozenset(
        {JobState.RUNNING, JobState.PREEMPTED, JobState.QUEUED, JobState.SUCCEEDED, *_END}
    ),
    JobState.PREEMPTED: frozenset({JobState.QUEUED, *_END}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


class IllegalTransition(Conflict):
    """A job state change the state machine does not allow."""

    def __init__(self, job_id: str, src: JobState, dst: JobState) -> None:
        self.src, self.dst = src, dst
        allowed = ", ".join(sorted(TRANSITIONS[src])) or "none (terminal)"
        super().__init__(
            f"job {job_id}: illegal transition {src} -> {dst}",
            fix=f"from {src} the allowed next states are: {allowed}",
        )


def check_transition(job_id: str, src: JobState, dst: JobState) -> None:
    """Raise :class:`IllegalTransition` unless ``src -> dst`` is in :data:`TRANSITIONS`."""
    if dst not in TRANSITIONS[src]:
        raise IllegalTransition(job_id, src, dst)


class Market(StrEnum):
    """How capacity is bought: spot (preemptible, cheap) or on demand; jobs and instances alike."""

    SPOT = "spot"
    ON_DEMAND = "on_demand"


class NodeState(StrEnum):
    REQUESTED = "REQUESTED"  # intent written, launch not confirmed
    PROVISIONING = "PROVISIONING"  # provider accepted, not ready
    READY = "READY"
    NOTICED = "NOTICED"  # preemption notice received
    PREEMPTED = "PREEMPTED"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    FAILED = "FAILED"  # launch failed (no capacity)


NODE_GONE: frozenset[NodeState] = frozenset(
    {NodeState.PREEMPTED, NodeState.TERMINATED, NodeState.FAILED}
)


# --------------------------------------------------------------------------------------------
# Tenants
# --------------------------------------------------------------------------------------------
def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


class TenantSpec(BaseModel):
    """What an admin gives to create a tenant."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                      description="Unique tenant name (letters, digits, _ . -).")
    max_gpus: StrictInt = Field(default=64, ge=1, le=100_000, description="GPU limit across all jobs.")


class Tenant(BaseModel):
    id: str
    name: str
    max_gpus: int
    created_at: float
    token_hash: str = Field(exclude=True, repr=False)


# --------------------------------------------------------------------------------------------
# Jobs
# --------------------------------------------------------------------------------------------
def int_schema(lo: int, hi: int) -> dict[str, Any]:
    """JSON Schema of a bounded integer (an item's bounds, which pydantic's own schema of a
    validated integer does not name as ``minimum``/``maximum``)."""
    return {"type": "integer", "minimum": lo, "maximum": hi}


def _null(*fields: str) -> dict[str, Any]:
    """JSON Schema: each of ``fields``, when present, is null."""
    return {"properties": {f: {"type": "null"} for f in fields}}


def _given(field: str, kind: str) -> dict[str, Any]:
    """JSON Schema: ``field`` is present and of JSON type ``kind`` (not null)."""
    return {"required": [field], "properties": {field: {"type": kind}}}


# What JobSpec's model validator checks across fields, stated in its JSON Schema (the OpenAPI):
# a deadline (and a deadline policy) for kind=deadline only; runtime_env only with an
# entrypoint; entrypoint or workload, not both. That deadline_hours covers compute_hours +
# overhead_hours compares two numbers, which JSON Schema cannot: its description says it.
JOB_SPEC_RULES: list[dict[str, Any]] = [
    {"if": {"required": ["kind"], "properties": {"kind": {"const": "deadline"}}},
     "then": {"anyOf": [_given("deadline_hours", "number"), _given("deadline", "number")]},
     "else": _null("deadline_hours", "deadline", "policy")},
    {"if": _given("runtime_env", "object"), "then": _given("entrypoint", "string")},
    {"if": _given("entrypoint", "string"), "then": _null("workload")},
]


class JobSpec(BaseModel):
    """A job as submitted: validated here, so nothing invalid reaches the store."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False,
                              json_schema_extra=lambda schema: schema.update(allOf=JOB_SPEC_RULES))

    name: Name = Field(min_length=1, max_length=128, description="Free-form job name (printable).")
    kind: JobKind = Field(default=JobKind.SPOT, description="hp | spot | deadline")
    gpus_per_worker: StrictInt = Field(default=1, ge=1, le=64)
    workers: StrictInt = Field(default=1, ge=1, le=256, description="Gang size: all workers or none.")
    accelerator: str | None = Field(default=None, max_length=32, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                                    description="GPU model (V100, H100); null = any.")
    compute_hours: StrictFloat = Field(gt=0, le=10_000, description="Estimated compute hours C.")
    deadline_hours: StrictFloat | None = Field(
        default=None, gt=0, le=100_000,
        description="Deadline relative to submission (deadline jobs; or give `deadline`); at "
                    "least compute_hours + overhead_hours.")
    deadline: StrictFloat | None = Field(default=None, ge=0, le=MAX_DEADLINE_S,
                                         description="Absolute deadline, control-plane seconds.")
    overhead_hours: StrictFloat = Field(default=0.05, ge=0, le=24, description="Changeover overhead d.")
    checkpoint_hours: StrictFloat = Field(default=0.005, ge=0, le=24,
                                          description="Time to write one checkpoint (delta).")
    entrypoint: Command | None = Field(default=None, max_length=4096,
                                       description="Command to run; null = simulated workload.")
    workload: Literal["simulated"] | None = None
    params: dict[str, Any] = Field(default_factory=dict, description="Parameters (bags).",
                                   json_schema_extra=params_schema)
    env: dict[EnvKey, EnvValue] = Field(
        default_factory=dict, max_length=MAX_ENV_VARS, json_schema_extra=env_schema,
        description=f"Environment variables (at most {MAX_ENV_VARS}, values up to {MAX_ENV_VALUE} characters).")
    replicas: StrictInt = Field(default=1, ge=1, le=64, description="Executor replicas.")
    policy: str | None = Field(
        default=None, max_length=64,
        description="Deadline jobs: the deadline policy (uniform_progress, spotplane, greedy, ...); "
                    "null = the control plane's default (spotplane on a multi-zone fleet).")
    bag_id: str | None = Field(default=None, max_length=64)
    runtime_env: RuntimeEnv | None = Field(
        default=None, description="Ray runtime_env of the entrypoint: the user's uploaded code, "
                                  "pip/uv, env_vars (docs/execution.md).")
    metadata: dict[Annotated[str, Field(min_length=1, max_length=256)],
                   Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=dict, max_length=MAX_METADATA, description="Free-form labels (Ray job metadata).")
    max_cost: StrictFloat | None = Field(
        default=None, gt=0, le=1e9,
        description="Most dollars the job may cost; a deadline job whose cheapest plan costs more "
                    "is refused at submission, any job is stopped when it reaches it.")
    max_restarts_on_error: StrictInt = Field(
        default=0, ge=0, le=100,
        description="Restarts from the last checkpoint after an exit code in "
                    "restart_on_exit_codes; the next such exit fails the job.")
    restart_on_exit_codes: list[Annotated[StrictInt, Field(ge=-255, le=255),
                                             WithJsonSchema(int_schema(-255, 255))]] = Field(
        default_factory=list, max_length=32,
        description="Exit codes that restart the job (up to max_restarts_on_error times); any "
                    "other code fails it.")
    max_duration_hours: StrictFloat | None = Field(
        default=None, gt=0, le=100_000,
        description="Wall time from the first start after which the job is stopped (FAILED).")
    checkpoint_gb: StrictFloat | None = Field(
        default=None, ge=0, le=1e6,
        description="Estimated size of one checkpoint in GB: what a move between regions carries "
                    "(its egress) until the job has written one; null: unknown.")

    @model_validator(mode="after")
    def _check(self) -> JobSpec:
        check_finite_tree(self.params, "params")
        if self.kind is JobKind.DEADLINE:
            if self.deadline_hours is None and self.deadline is None:
                raise ValueError("deadline_hours: a deadline job needs deadline_hours (or deadline); "
                                 "give deadline_hours > compute_hours + overhead_hours")
            if self.deadline_hours is not None and (
                self.deadline_hours < self.compute_hours + self.overhead_hours
            ):
                raise ValueError(
                    f"deadline_hours: {self.deadline_hours} h is less than compute_hours + "
                    f"overhead_hours = {self.compute_hours + self.overhead_hours} h; "
                    "raise deadline_hours or lower compute_hours")
        elif self.deadline_hours is not None or self.deadline is not None:
            raise ValueError(f"deadline_hours: only kind=deadline jobs take a deadline "
                             f"(kind is {self.kind}); set kind: deadline or drop the deadline")
        elif self.policy is not None:
            raise ValueError(f"policy: only kind=deadline jobs take a deadline policy "
                             f"(kind is {self.kind}); set kind: deadline or drop the policy")
        if self.entrypoint is None and self.workload is None:
            self.workload = "simulated"
        if self.runtime_env is not None and self.entrypoint is None:
            raise ValueError("runtime_env: only a job with an entrypoint runs code; "
                             "add an entrypoint or drop runtime_env")
        if self.entrypoint is not None and self.workload is not None:
            raise ValueError("workload: give either entrypoint (a command) or "
                             "workload: simulated, not both")
        return self

    @property
    def gpus(self) -> int:
        return self.gpus_per_worker * self.workers


class Job(Row):
    """A stored job with its state, progress and cost."""

    model_config = ConfigDict(allow_inf_nan=False)  # a non-finite number is never stored

    id: str
    tenant_id: str
    name: str
    kind: JobKind
    spec: JobSpec
    state: JobState = JobState.PENDING
    bag_id: str | None = None
    submitted_at: float
    deadline_at: float | None = None  # absolute, resolved at submission
    started_at: float | None = None  # first RUNNING
    finished_at: float | None = None
    progress_hours: float = 0.0
    checkpointed_hours: float = 0.0
    checkpoint_left_hours: float = 0.0  # > 0 while CHECKPOINTING (simulated workload)
    next_checkpoint_hours: float | None = None
    segment_start_hours: float = 0.0  # progress when the current nodes started (planner input)
    segment_node_age_hours: float = 0.0  # the oldest node's VM age then (planner input)
    cost: float = 0.0
    on_demand_cost: float = 0.0  # what the same GPU hours would cost on on-demand only
    gpu_hours: float = 0.0  # GPU hours billed so far
    preemptions: int = 0
    checkpoints: int = 0
    checkpoint_bytes: int = 0  # executor jobs: bytes of every checkpoint written (artifact store)
    restore_fallbacks: int = 0  # executor jobs: restores that skipped a bad newer checkpoint
    attempts: int = 0
    market: Market | None = None
    zone: str | None = None
    node_ids: list[str] = Field(default_factory=list)
    accounted_at: float | None = None  # progress accounted up to here
    billed_at: float | None = None  # node cost billed up to here
    changeover_left_hours: float = 0.0  # overhead d still to pay before progress counts
    cancel_requested: bool = False
    policy_action: str | None = None  # deadline jobs: the policy's last action (idle/spot/on_demand)
    policy_zone: str | None = None
    message: str = ""
    egress_bytes: int = 0  # checkpoint bytes moved between regions or clouds (cumulative)
    egress_cost: float = 0.0  # dollars of that egress (policies.egress rates)
    cluster: str | None = None  # the workload cluster its replicas run on now
    bill: dict[str, float] = Field(default_factory=dict)  # bill line -> dollars or hours
    error_restarts: int = 0  # restarts after a listed exit code (apart from preemptions)
    exit_code: int | None = None  # the last attempt's exit code, when it ended on its own
    last_checkpoint_bytes: int = 0  # executor jobs: bytes of the newest checkpoint written

    @property
    def gpus(self) -> int:
        return self.spec.gpus

    @property
    def nodes_needed(self) -> int:
        """Nodes of the gang: every worker of every replica on its own node (seed 004)."""
        return self.spec.workers * self.spec.replicas

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def deadline_met(self) -> bool | None:
        if self.deadline_at is None:
            return None
        if self.state is not JobState.SUCCEEDED or self.finished_at is None:
            return False if self.terminal else None
        return self.finished_at <= self.deadline_at + 1e-6


# --------------------------------------------------------------------------------------------
# Bags of jobs (seed 001 Sec. 5)
# --------------------------------------------------------------------------------------------
class BagSpec(BaseModel):
    """One submission of many parameter sets of one entrypoint (or simulated workload)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: Name = Field(min_length=1, max_length=120,
                       description="Bag name; its jobs are named NAME-0, NAME-1, ...")
    template: JobSpec = Field(description="Every field of each job except its params.")
    params: list[Annotated[dict[str, Any], Field(json_schema_extra=params_schema)]] = Field(
        min_length=1, max_length=10_000,
                                         description="One parameter set per job.")
    compute_hours: list[Annotated[StrictFloat, Field(gt=0, le=10_000)]] | None = Field(
        default=None, min_length=1, max_length=10_000,
        description="Per-job compute hours (simulated bags), one per parameter set; default: "
                    "template's.")

    @model_validator(mode="after")
    def _check(self) -> BagSpec:
        check_finite_tree(self.params, "params")
        if self.compute_hours is not None:
            if len(self.compute_hours) != len(self.params):
                raise ValueError(f"compute_hours: {len(self.compute_hours)} values for "
                                 f"{len(self.params)} params; give one per parameter set")
            if any(c <= 0 for c in self.compute_hours):
                raise ValueError("compute_hours: every value must be > 0")
        return self


class Bag(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)

    id: str
    tenant_id: str
    name: str
    created_at: float
    jobs: int
    finished: int = 0
    estimate_hours: float  # learned: mean runtime of the bag's finished jobs (prior: template C)
    job_ids: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Nodes, events, decisions, ledger rows
# --------------------------------------------------------------------------------------------
class Node(Row):
    id: str
    provider: str
    cloud: str
    zone: str
    instance_type: str
    accelerator: str
    accelerator_count: int
    market: Market
    price_per_hour: float
    on_demand_price_per_hour: float
    state: NodeState = NodeState.REQUESTED
    intent_id: str
    instance_id: str | None = None
    job_id: str | None = None  # allocation: the (one) job whose worker runs here
    tenant_id: str | None = None
    requested_at: float
    launched_at: float | None = None  # age for the preemption model
    ready_at: float | None = None
    ended_at: float | None = None
    notice_at: float | None = None
    idle_since: float | None = None  # ready with no job since (kept a while for reuse)
    replacement: bool = False  # replaces a lost replica's node: start a replica when ready

    @property
    def gone(self) -> bool:
        return self.state in NODE_GONE


class Event(BaseModel):
    """Every job transition (and node happening) with its cause."""

    id: int | None = None
    at: float
    tenant_id: str | None = None
    job_id: str | None = None
    node_id: str | None = None
    kind: str  # "transition" | "node" | "notice" | "checkpoint" | "cost" ...
    src: str | None = None
    dst: str | None = None
    cause: str


class Decision(BaseModel):
    """One policy decision (deadline policy action, placement, preemption), for the trace."""

    id: int | None = None
    at: float
    job_id: str
    tenant_id: str | None = None
    policy: str
    action: str  # idle | spot | on_demand | place | replace | wait | preempt | admit | reject
    zone: str | None = None
    reason: str = ""
    observation: dict[str, Any] = Field(default_factory=dict)



# --------------------------------------------------------------------------------------------
# Budgets (policies.budgets holds the rule)
# --------------------------------------------------------------------------------------------
class TenantBudget(BaseModel):
    """A tenant's spend limits as the admin sets them; null: no limit."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    hourly_cap: StrictFloat | None = Field(
        default=None, gt=0, le=1e7, description="Most $/h the tenant's running nodes may cost.")
    monthly_budget: StrictFloat | None = Field(
        default=None, gt=0, le=1e10, description="Most $ per UTC calendar month.")
    soft_fraction: StrictFloat = Field(
        default=0.8, gt=0, le=1, description="The soft line (event, gauge, banner), as a "
                                             "fraction of each hard line.")
    protected: Literal["finish", "stop"] = Field(
        default="finish", description="HP and deadline jobs at the monthly hard line: finish "
                                      "(run to the end) or stop (at their next checkpoint, "
                                      "after the spot jobs).")


# --------------------------------------------------------------------------------------------
# Fair share between tenants
# --------------------------------------------------------------------------------------------
class TenantShareSpec(BaseModel):
    """What an admin sets of a tenant's fair share: its weight and nominal GPUs per pool."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    weight: StrictFloat = Field(
        default=1.0, gt=0, le=1000,
        description="Weight of the tenant's share of each pool's GPUs beside other tenants'.")
    nominal_gpus: dict[Annotated[str, Field(min_length=1, max_length=32,
                                            pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")],
                       Annotated[StrictInt, Field(ge=0, le=100_000),
                                 WithJsonSchema(int_schema(0, 100_000))]] = Field(
        default_factory=dict, max_length=64,
        description="GPUs of a pool (by accelerator) the tenant is owed whenever it asks; "
                    "an idle tenant's nominal GPUs are lent to busy ones. A pool not named: "
                    "the weight's part of the pool.")


class TenantShare(TenantShareSpec):
    """A tenant's stored fair share."""

    tenant_id: str
