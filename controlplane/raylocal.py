"""Start a private local Ray that never collides with another Ray on the same machine.

``ray.init()`` picks free ports for everything but the dashboard agent, which always listens on
52365 (``ray start`` has ``--dashboard-agent-listen-port``; ``ray.init`` does not expose it).
With two local Rays on one machine (a test session beside a ``spotplane up`` it spawned, or two
``up``s), the second agent cannot bind and every Ray job submission there fails with "No
available agent". :func:`init_local_ray` gives the agent a free port as well, and the cluster
its own temp dir (so ``address="auto"`` inside it finds it, not the machine's newest Ray).
"""

from __future__ import annotations

import inspect
import os
import socket
import tempfile
import threading
from typing import Any

_lock = threading.Lock()

# Serve restarts a dead HTTP proxy only after its health check failed 3 times in a row, one check
# every RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S (Ray's default 10 s: 20-30 s of refused
# connections). Every 1 s brings detection to ~3 s (a new proxy then takes a few seconds to
# start); each check is one cheap actor call.
PROXY_HEALTH_CHECK_PERIOD_S = "1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_local_ray(**kwargs: Any) -> Any:
    """``ray.init(**kwargs)`` for a new local cluster, with free dashboard and agent ports
    (and a 1 s Serve proxy health-check period unless the environment sets one)."""
    import ray
    from ray._private import parameter

    kwargs.setdefault("dashboard_port", free_port())
    # Its own temp dir, naming its own GCS: the job supervisor resolves "auto" (the address its
    # jobs' drivers get) from the temp dir's ray_current_cluster, else from any GCS process on
    # the machine, so with several Rays a job could join another Ray (and miss its checkpoint
    # actor, or lose its GCS when that Ray stops).
    temp_dir = kwargs.setdefault("_temp_dir", tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    # read by the Serve controller's worker: set before Ray starts so every worker inherits it
    os.environ.setdefault("RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S", PROXY_HEALTH_CHECK_PERIOD_S)
    with _lock:
        init = parameter.RayParams.__init__
        names = [n for n, p in inspect.signature(init).parameters.items() if p.default is not p.empty]
        defaults = list(init.__defaults__ or ())
        slot = names.index("dashboard_agent_listen_port")
        saved = defaults[slot]
        defaults[slot] = free_port()
        init.__defaults__ = tuple(defaults)
        try:
            ctx = ray.init(**kwargs)
        finally:
            defaults[slot] = saved
            init.__defaults__ = tuple(defaults)
    # what `ray start` writes and ray.init does not: without it "auto" scans the machine's
    # processes for a GCS and may pick another Ray's
    from ray._private.utils import write_ray_address

    write_ray_address(ray.get_runtime_context().gcs_address, temp_dir)
    return ctx
