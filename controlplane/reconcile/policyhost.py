"""Where deadline policies live: in process (tests, benchmarks) or in Ray actors (actors/deadline.py).

The controller sends one batch of :class:`PolicyRequest` per tick and gets one
:class:`~policies.deadline.Action` per job. A host keeps one policy object per job, created with
``make_policy(name, task, tick_hours=...)`` on first sight and restored from its saved
``state_dict`` (in the store) after a restart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from controlplane.core.errors import InvalidInput
from controlplane.store import Store
from policies.deadline import (
    Action,
    DeadlinePolicy,
    DeadlineTask,
    Observation,
    make_policy,
    registered_policies,
)
from policies.paid_observation import Probing

#: The default where a job's offers span several zones: ``python -m benchmarks.multiregion``
#: measures spotplane at +2.2 % of the omniscient cost against +7.0 % for eager failover.
MULTI_ZONE_DEFAULT = "spotplane"
#: The same where zones are known only from evidence (``zone_observation: evidence``):
#: ``--observe paid`` measures it at +2.4 % (13 zones) and +4.6 % (6 zones) of the omniscient cost.
MULTI_ZONE_EVIDENCE_DEFAULT = "spotplane_probing"
SINGLE_ZONE_DEFAULT = "uniform_progress"
#: The default where a job's zones span several regions (or clouds): spotplane that weighs the
#: egress of moving its checkpoint there before it moves (``policies.egressaware``).
MULTI_REGION_DEFAULT = "spotplane_egress"
DEFAULTS = (MULTI_ZONE_DEFAULT, MULTI_ZONE_EVIDENCE_DEFAULT, SINGLE_ZONE_DEFAULT,
            MULTI_REGION_DEFAULT)


def live_policies() -> tuple[str, ...]:
    """Deadline policies a job may name in ``policy:`` (those registered ``live``): the
    defaults first, then the others by name."""
    live = [name for name, entry in registered_policies().items() if entry.live]
    return tuple([d for d in DEFAULTS if d in live] + sorted(set(live) - set(DEFAULTS)))


def check_policy(name: str, field: str = "policy") -> str:
    """``name`` if a job may choose it, else :class:`InvalidInput` (a 422) listing the choices."""
    if name not in live_policies():
        raise InvalidInput(field, f"unknown deadline policy {name!r}",
                           fix=f"use one of {', '.join(live_policies())}, or leave it null for "
                               f"the default ({MULTI_ZONE_DEFAULT} on a multi-zone fleet)")
    return name


def default_policy(zones: int, *, evidence: bool = False, regions: int = 1) -> str:
    """The policy a deadline job gets when neither its spec nor the settings name one
    (``evidence``: the controller knows zones only from what it ran, launched and probed;
    ``regions``: how many (cloud, region) places its zones span)."""
    if zones <= 1:
        return SINGLE_ZONE_DEFAULT
    if evidence:
        return MULTI_ZONE_EVIDENCE_DEFAULT
    return MULTI_REGION_DEFAULT if regions > 1 else MULTI_ZONE_DEFAULT


@dataclass(frozen=True)
class PolicyRequest:
    job_id: str
    policy: str
    task: DeadlineTask
    obs: Observation
    tick_hours: float = 0.0
    retry_hours: float = 0.0  # probing policies: how soon a zone that refused may be tried again


@dataclass(frozen=True)
class PolicyFailed:
    """A job's policy raised: the host answers this for the job, the others still decide."""

    reason: str


class DeadlinePolicyHost(Protocol):
    def decide(self, requests: Sequence[PolicyRequest]) -> dict[str, Action | PolicyFailed]: ...

    def forget(self, job_ids: Sequence[str]) -> None: ...


class PolicyBook:
    """Policies of several jobs in one process (what one DeadlinePolicyActor hosts)."""

    def __init__(self, store: Store | None = None) -> None:
        self.store = store  # policy state survives restarts in the store; None: in memory only
        self.policies: dict[str, DeadlinePolicy] = {}
        self._saved: dict[str, dict[str, Any]] = {}

    def _policy(self, req: PolicyRequest) -> DeadlinePolicy:
        pol = self.policies.get(req.job_id)
        if pol is None:
            entry = registered_policies().get(req.policy)
            kwargs = {"tick_hours": req.tick_hours} if entry is not None and entry.ticked else {}
            if entry is not None and entry.probing and req.retry_hours > 0:  # a live controller's
                kwargs.update(retry_hours=req.retry_hours, probe_idle=True)
            pol = make_policy(req.policy, req.task, **kwargs)
            saved = self.store.policy_state(req.job_id) if self.store is not None else None
            if saved:
                pol.load_state_dict(saved)
                self._saved[req.job_id] = saved
            self.policies[req.job_id] = pol
        return pol

    def decide(self, requests: Sequence[PolicyRequest]) -> dict[str, Action | PolicyFailed]:
        out: dict[str, Action | PolicyFailed] = {}
        ok: list[PolicyRequest] = []
        for r in requests:
            try:
                pol = self._policy(r)
                act = pol.decide(r.obs)
                if isinstance(pol, Probing):
                    act = replace(act, probes=tuple(pol.probes(r.obs)))
                out[r.job_id] = act
                ok.append(r)
            except Exception as exc:  # noqa: BLE001 - one job's policy must not stop the others
                out[r.job_id] = PolicyFailed(f"policy {r.policy} raised {exc!r}")
                self.forget([r.job_id])
        if self.store is not None and ok:
            states = {r.job_id: self.policies[r.job_id].state_dict() for r in ok}
            changed = {k: v for k, v in states.items() if self._saved.get(k) != v}
            if changed:
                self.store.put_policy_states(changed)
                self._saved.update(changed)
        return out

    def forget(self, job_ids: Sequence[str]) -> None:
        for j in job_ids:
            self.policies.pop(j, None)
            self._saved.pop(j, None)

    def __len__(self) -> int:
        return len(self.policies)


LocalDeadlineHost = PolicyBook
