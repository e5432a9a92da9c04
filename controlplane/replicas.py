"""The executor capability the reconcile loop uses for replicated jobs (seed 004 replication).

Every executor speaks ``controlplane.controller.JobExecutor``; one that also keeps a job's
replicas alive through the loss of a node declares :class:`ReplicatingExecutor` too (an
optional interface, checked with ``isinstance``, in the style of Kubernetes' scheduling
framework plugins). An executor without it gets the usual rollback on every preemption.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from controlplane.models import Job, Node


@runtime_checkable
class ReplicatingExecutor(Protocol):
    """Replica bookkeeping the loop calls when a node of a replicated job is lost or replaced."""

    def node_preempted(self, job: Job, node_id: str, reason: str = "node preempted") -> bool:
        """The replica on ``node_id`` is gone; True when another replica of ``job`` survives."""
        ...

    def start_replacement(self, job: Job, node: Node) -> object:
        """Start a replica on the replacement ``node``, restoring from a survivor's checkpoint."""
        ...


def replicating(executor: object) -> ReplicatingExecutor:
    """``executor`` as a :class:`ReplicatingExecutor`; the caller has checked that it is one."""
    if not isinstance(executor, ReplicatingExecutor):
        raise TypeError(f"{type(executor).__name__} does not replicate jobs")
    return executor
