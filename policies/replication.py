"""Adaptive replication (seed 004, Sec. III): run a second spot replica only while it pays.

Seed 004 runs every job on two spot instances in different zones: when one is preempted the
survivor checkpoints at once and a replacement restores from that checkpoint, so a preemption
costs the job (almost) no time. It also costs a second instance all the time. The rule here keeps
the benefit where it is worth the money:

**Time a second replica saves.** While a single replica runs, preemptions come at the zone's rate
``lambda`` (per hour; the preemption model's hazard at the node's age). Each one costs the job
the work done since the last checkpoint ``L``, the restart overhead ``R`` and the wait ``W`` for
capacity elsewhere, and the replacement itself outlives its restart only with probability
``p = S(R)`` (young spot VMs die most: seed 001's bathtub, a Weibull with shape < 1 on AWS), so
recovery takes ``(R + W) / p``; with a survivor the job pays only the survivor's immediate
checkpoint ``delta`` -- if there is a survivor: the second replica is itself a young spot VM that
must outlive its own restart, and zones fail together (on the AWS traces another zone is up at
only 83% of preemptions), so it is there when needed with probability ``q``. A second replica
therefore saves ``s = q * lambda * (L + (R + W) / p - delta)`` job-hours per hour (first order:
a rate, not a horizon).

**What an hour is worth.** Without deadline pressure, finishing an hour sooner saves an hour of
the primary's bill (``spot_price``). When the deadline is at risk the finish time is pinned to
the deadline (seed 003's safety net moves the job to on-demand), so an hour saved on spot is an
hour not bought on on-demand: worth ``on_demand_price - spot_price``. The risk is
``u = clip(D / slack, 0, 1)`` where ``D = remaining_work * lambda * (L + (R + W) / p)`` is the delay a
single replica expects over the rest of the job and ``slack`` the deadline minus now minus the
remaining work and planned overheads (``u = 0`` without a deadline, ``1`` once slack is gone).
The value of an hour is ``v = (1 - u) * spot_price + u * (on_demand_price - spot_price)``.

**Rule.** Replicate while ``v * s > c2``, where ``c2`` is the second instance's price per hour,
with a hysteresis band (start above ``(1 + band) * c2``, stop below ``(1 - band) * c2``) so the
decision does not flap at every tick. Starting a replica also pays its restart ``R`` before it
protects anything; over the primary's expected remaining life ``1 / lambda`` that leaves a
fraction ``max(0, 1 - lambda * R)`` of useful time, so a *new* replica must clear
``v * s * (1 - lambda * R) > (1 + band) * c2``. So: calm zones or ample slack -> one replica (cheap);
stormy zones with a tight deadline -> two (fast). Pure: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.core.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class ReplicationInputs:
    """What the rule looks at (hours and prices per hour)."""

    hazard_per_hour: float  # lambda: primary zone's preemption rate now
    unsaved_hours: float  # L: work a preemption would lose (since the last checkpoint)
    restart_hours: float  # R: restart / restore overhead of a replacement
    remaining_work_hours: float
    spot_price: float  # of the primary (hours saved save its bill)
    second_price: float  # c2: the second replica's price per hour
    on_demand_price: float
    slack_hours: float | None = (
        None  # deadline - now - remaining work - overheads; None: no deadline
    )
    wait_hours: float = 0.0  # W: expected wait for capacity after a preemption
    survivor_checkpoint_hours: float = 0.0  # delta: the survivor's immediate checkpoint
    restart_survival: float = (
        1.0  # p: P(a fresh replacement outlives its restart), S(R) of the model
    )
    peer_survival: float = 1.0  # q: P(the second replica is up and restored when the primary dies)

    def __post_init__(self) -> None:
        for name in (
            "hazard_per_hour",
            "unsaved_hours",
            "restart_hours",
            "remaining_work_hours",
            "spot_price",
            "second_price",
            "on_demand_price",
            "wait_hours",
            "survivor_checkpoint_hours",
        ):
            v = getattr(self, name)
            if not v >= 0:  # also refuses NaN
                raise InvalidInput(name, f"must be >= 0, got {v}")
        if not 0 < self.restart_survival <= 1:
            raise InvalidInput(
                "restart_survival", f"must be within (0, 1], got {self.restart_survival}"
            )
        if not 0 <= self.peer_survival <= 1:
            raise InvalidInput("peer_survival", f"must be within [0, 1], got {self.peer_survival}")
        if self.on_demand_price < self.spot_price:
            raise InvalidInput(
                "on_demand_price",
                f"{self.on_demand_price} is below the spot price {self.spot_price}",
                fix="pass the on-demand list price of the same instance type",
            )


@dataclass(frozen=True, slots=True)
class ReplicationDecision:
    """The rule's answer and its reasons (money per hour)."""

    replicate: bool
    saving_per_hour: float  # v * s
    cost_per_hour: float  # c2
    hours_saved_per_hour: float  # s
    urgency: float  # u
    reason: str


def recovery_hours(x: ReplicationInputs) -> float:
    """``(R + W) / p``: a replacement may itself be preempted before its restart is done."""
    return (x.restart_hours + x.wait_hours) / x.restart_survival


def hours_saved_per_hour(x: ReplicationInputs) -> float:
    """``s = q * lambda * (L + (R + W) / p - delta)``: job-hours a survivor saves per hour of replication."""
    per_preemption = max(0.0, x.unsaved_hours + recovery_hours(x) - x.survivor_checkpoint_hours)
    return x.peer_survival * x.hazard_per_hour * per_preemption


def urgency(x: ReplicationInputs) -> float:
    """``u = clip(D / slack, 0, 1)``: how much of the slack a single replica's expected delay eats."""
    if x.slack_hours is None:
        return 0.0
    if x.slack_hours <= 0:
        return 1.0
    delay = x.remaining_work_hours * x.hazard_per_hour * (x.unsaved_hours + recovery_hours(x))
    return min(1.0, max(0.0, delay / x.slack_hours))


def decide(
    x: ReplicationInputs, *, replicated_now: bool = False, band: float = 0.1
) -> ReplicationDecision:
    """Replicate while the money value of the time saved beats the second instance's price."""
    if not 0 <= band < 1:
        raise InvalidInput("band", f"must be within [0, 1), got {band}")
    s = hours_saved_per_hour(x)
    u = urgency(x)
    value = (1 - u) * x.spot_price + u * (x.on_demand_price - x.spot_price)
    saving = value * s
    if not replicated_now:  # a new replica is useless during its own restart
        saving *= max(0.0, 1.0 - x.hazard_per_hour * x.restart_hours)
    threshold = x.second_price * ((1 - band) if replicated_now else (1 + band))
    replicate = x.remaining_work_hours > 0 and saving > threshold
    reason = (
        f"saves {s:.3f} h/h x ${value:.2f}/h (urgency {u:.2f}) = ${saving:.3f}/h "
        f"{'>' if replicate else '<='} ${threshold:.3f}/h for the second replica"
    )
    return ReplicationDecision(replicate, saving, x.second_price, s, u, reason)
