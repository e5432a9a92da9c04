"""Length-prefixed pickled messages over a child process's pipes: how the control plane talks
to the processes that are drivers of other Ray clusters (the actor bridge, a cluster's
autoscaler driver). Each message is a 4-byte big-endian length, then that many pickled bytes."""

from __future__ import annotations

import pickle
import struct
from collections.abc import Callable
from typing import IO, Any

HEADER = struct.Struct(">I")


def send(out: IO[bytes], obj: Any, dumps: Callable[[Any], bytes] = pickle.dumps) -> None:
    """Write one message (``dumps``: ``cloudpickle.dumps`` where ``obj`` may hold closures)."""
    data = dumps(obj)
    out.write(HEADER.pack(len(data)) + data)
    out.flush()


def recv(inp: IO[bytes]) -> Any:
    """Read one message (EOFError when the other side closed)."""
    head = inp.read(HEADER.size)
    if len(head) < HEADER.size:
        raise EOFError("the other side closed the pipe")
    (size,) = HEADER.unpack(head)
    data = inp.read(size)
    if len(data) < size:
        raise EOFError("the other side closed the pipe mid-message")
    return pickle.loads(data)
