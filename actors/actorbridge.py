"""The checkpoint actors of a workload Ray cluster, driven from a process that is not its driver.

A job's :class:`~actors.checkpoint.CheckpointActor` must live on the cluster the job runs on
(the job finds it with ``ray.get_actor``), and that cluster is not the control plane's
(docs/security.md). A process is a driver of one Ray cluster at a time, and the executor runs
inside the control plane's controller actor, so it reaches the workload cluster's actors
through :class:`ActorBridge`: a child process (``python -m actors.actorbridge GCS NS``,
started with a scrubbed environment) that is a driver of the workload cluster only, owns the
checkpoint actors and answers length-prefixed pickled requests on its stdin/stdout.

:class:`LocalActors` is the same interface over this process's own Ray connection, for an
executor that runs as a driver of the workload cluster itself (tests, an operator's runner).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

from actors.checkpoint import RemoteCheckpointActor
from actors.raylocal import scrubbed_env
from clusters.childdriver import DriverChild, serve_requests

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 120.0  # a checkpoint actor placed and planned within this, or refused
ANSWER_SLACK_S = 60.0  # the bridge answers within an op's own wait plus this, or is restarted


class Actors(Protocol):
    """What the executor does with checkpoint actors on the workload cluster."""

    def resources(self) -> dict[str, float]: ...

    def create(self, options: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]: ...

    def call(self, name: str, method: str, *args: Any, timeout: float | None = None) -> Any: ...

    def kill(self, name: str) -> None: ...

    def create_group(self, name: str, bundles: list[dict[str, float]], strategy: str,
                     timeout_s: float) -> list[str]: ...

    def remove_group(self, name: str) -> None: ...

    def close(self) -> None: ...


class ActorOps:
    """The operations, over this process's Ray connection (named actors in one namespace)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.handles: dict[str, Any] = {}  # a non-detached actor lives while its owner holds one

    def resources(self) -> dict[str, float]:
        import ray

        return {k: float(v) for k, v in ray.cluster_resources().items()} if ray.is_initialized() else {}

    def create(self, options: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Start a checkpoint actor and wait until it is placed and planned."""
        import ray
        from ray.exceptions import GetTimeoutError

        actor = RemoteCheckpointActor.options(**options).remote(**kwargs)  # type: ignore[attr-defined]
        try:
            status = dict(ray.get(actor.status.remote(), timeout=READY_TIMEOUT_S))  # type: ignore[attr-defined]
        except GetTimeoutError:
            ray.kill(actor, no_restart=True)  # type: ignore[arg-type]
            raise TimeoutError(f"checkpoint actor {options['name']} was not placed within "
                               f"{READY_TIMEOUT_S:g} s (resources {options.get('resources')}: "
                               "is its node still in the cluster?)") from None
        self.handles[str(options["name"])] = actor
        return status

    def call(self, name: str, method: str, *args: Any, timeout: float | None = None) -> Any:
        """``actor.method(*args)``: the result within ``timeout`` s, or fire-and-forget (None).
        Raises LookupError when no such actor lives."""
        import ray

        handle = self.handles.get(name)
        if handle is None:
            try:  # started by an earlier owner (a restarted controller, detached actors)
                handle = ray.get_actor(name, namespace=self.namespace)
            except ValueError as e:
                raise LookupError(f"no checkpoint actor {name}") from e
            self.handles[name] = handle
        ref = getattr(handle, method).remote(*args)
        return None if timeout is None else ray.get(ref, timeout=timeout)

    def kill(self, name: str) -> None:
        """Kill the actor and wait until its name is released (``ray.kill`` is asynchronous:
        until then the next attempt's ``get_if_exists`` would get the dying actor)."""
        import ray

        handle = self.handles.pop(name, None)
        with contextlib.suppress(ValueError):
            ray.kill(handle or ray.get_actor(name, namespace=self.namespace), no_restart=True)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            try:
                ray.get_actor(name, namespace=self.namespace)
            except ValueError:
                return
            time.sleep(0.05)
        log.warning("checkpoint actor %s still registered 10 s after ray.kill", name)

    def create_group(self, name: str, bundles: list[dict[str, float]], strategy: str,
                     timeout_s: float) -> list[str]:
        """A named placement group (detached: it outlives this driver until removed), ready
        within ``timeout_s``; returns the Ray node id of each bundle."""
        import ray
        from ray.util.placement_group import placement_group, placement_group_table

        self.remove_group(name)  # an earlier attempt's, left by a controller that died
        pg = placement_group(bundles, strategy=strategy, name=name, lifetime="detached")
        if not pg.wait(timeout_seconds=timeout_s):
            ray.util.remove_placement_group(pg)
            raise TimeoutError(f"placement group {name} ({strategy}, {bundles}) was not "
                               f"placed within {timeout_s:g} s")
        table = placement_group_table(pg)
        return [str(table["bundles_to_node_id"][i]) for i in range(len(bundles))]

    def remove_group(self, name: str) -> None:
        """Remove the named placement group (nothing when there is none)."""
        import ray

        try:
            pg = ray.util.get_placement_group(name)
        except ValueError:
            return
        ray.util.remove_placement_group(pg)

    def close(self) -> None:
        self.handles.clear()


LocalActors = ActorOps


def _dumps(obj: Any) -> bytes:
    from ray import cloudpickle

    return bytes(cloudpickle.dumps(obj))


class ActorBridge(DriverChild):
    """:class:`Actors` on another Ray cluster, through a child process that is its driver."""

    what = "actor bridge"

    def __init__(self, gcs_address: str, namespace: str, *, python: str = sys.executable,
                 token_path: str | None = None) -> None:
        env = scrubbed_env(token_path=token_path)
        if token_path is None:  # never present the control plane's own token (~/.ray) there
            env["RAY_AUTH_MODE"] = "disabled"
        super().__init__(gcs_address, env, python=python, dumps=_dumps)
        self.namespace = namespace

    def command(self) -> list[str]:
        """How the child is started."""
        return [self.python, "-m", "actors.actorbridge", self.gcs_address, self.namespace]

    def resources(self) -> dict[str, float]:
        return dict(self._ask("resources", wait_s=0.0))

    def create(self, options: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        return dict(self._ask("create", options, kwargs, wait_s=READY_TIMEOUT_S))

    def call(self, name: str, method: str, *args: Any, timeout: float | None = None) -> Any:
        return self._ask("call", name, method, *args, timeout=timeout, wait_s=timeout or 0.0)

    def kill(self, name: str) -> None:
        self._ask("kill", name, wait_s=10.0)

    def create_group(self, name: str, bundles: list[dict[str, float]], strategy: str,
                     timeout_s: float) -> list[str]:
        return list(self._ask("create_group", name, bundles, strategy, timeout_s,
                              wait_s=timeout_s))

    def remove_group(self, name: str) -> None:
        self._ask("remove_group", name, wait_s=0.0)

    def _ask(self, op: str, *args: Any, wait_s: float, **kwargs: Any) -> Any:
        """The child's answer to ``op`` within the op's own wait plus :data:`ANSWER_SLACK_S`."""
        return self.exchange((op, args, kwargs), wait_s + ANSWER_SLACK_S)


def serve(gcs_address: str, namespace: str) -> int:
    """The child: connect to the workload Ray, then answer requests until stdin closes."""
    import ray

    ops = ActorOps(namespace)

    def connect() -> Callable[[Any], Any]:
        ray.init(address=gcs_address, namespace=namespace, log_to_driver=False,
                 configure_logging=False)
        return lambda request: getattr(ops, request[0])(*request[1], **request[2])

    rc = serve_requests(connect, _dumps, missing=(LookupError,))
    if rc == 0:
        ops.close()
        ray.shutdown()
    return rc


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], sys.argv[2]))
