"""The Ray job executor, in parts: its typed configuration, the one factory, and the thin
:class:`RayJobExecutor` that starts a job's replicas on their nodes."""

from actors.execution.config import ExecutorConfig
from actors.execution.executor import RayJobExecutor
from actors.execution.factory import make_executor
from actors.execution.replicas import Replica, ReplicaSpec, ReplicaState

__all__ = ["ExecutorConfig", "RayJobExecutor", "Replica", "ReplicaSpec", "ReplicaState",
           "make_executor"]
