"""Start a private local Ray that never collides with another Ray on the same machine.

``ray.init()`` picks free ports for everything but the dashboard agent, which always listens on
52365 (``ray start`` has ``--dashboard-agent-listen-port``; ``ray.init`` does not expose it).
With two local Rays on one machine (a test session beside a ``spotplane up`` it spawned, or two
``up``s), the second agent cannot bind and every Ray job submission there fails with "No
available agent". :func:`init_local_ray` gives the agent a free port as well.
"""

from __future__ import annotations

import inspect
import socket
import threading
from typing import Any

_lock = threading.Lock()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_local_ray(**kwargs: Any) -> Any:
    """``ray.init(**kwargs)`` for a new local cluster, with free dashboard and agent ports."""
    import ray
    from ray._private import parameter

    kwargs.setdefault("dashboard_port", free_port())
    with _lock:
        init = parameter.RayParams.__init__
        names = [n for n, p in inspect.signature(init).parameters.items() if p.default is not p.empty]
        defaults = list(init.__defaults__ or ())
        slot = names.index("dashboard_agent_listen_port")
        saved = defaults[slot]
        defaults[slot] = free_port()
        init.__defaults__ = tuple(defaults)
        try:
            return ray.init(**kwargs)
        finally:
            defaults[slot] = saved
            init.__defaults__ = tuple(defaults)
