"""A child process that is a driver of another Ray cluster, asked over framed pipes.

A process is a driver of one Ray at a time, so the control plane reaches another cluster (its
actors, its autoscaler) through a child process started with a minimal environment. The parent
side, :class:`DriverChild`, starts the child at the first request, restarts it when it died or
hung, and stops it by closing its stdin; the child side, :func:`serve_requests`, connects, says
``ok`` (or why not) and answers each request until its stdin closes. Messages are
:mod:`clusters.frames`; answers are ``(status, value)`` with status ``ok``, ``missing`` (a
:class:`LookupError` in the child, raised again in the parent) or ``error``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import select
import subprocess
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clusters.frames import recv, send

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 120.0  # the child is a driver of its cluster within this, or is refused
PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # where ``python -m`` finds the children
Dumps = Callable[[Any], bytes]


class DriverChild(ABC):
    """The parent's end: one child process, driver of the Ray cluster at ``gcs_address``."""

    what = "driver"  # how errors name the child: "<what> of <gcs_address>"

    def __init__(self, gcs_address: str, env: dict[str, str], *, python: str = sys.executable,
                 dumps: Dumps = pickle.dumps) -> None:
        self.gcs_address = gcs_address
        self.env = env
        self.python = python
        self._dumps = dumps
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @abstractmethod
    def command(self) -> list[str]:
        """How the child is started."""

    def close(self) -> None:
        """Stop the child: its stdin closes, it disconnects and exits (killed after 15 s)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def exchange(self, request: Any, wait_s: float) -> Any:
        """The child's answer to ``request`` within ``wait_s``; a child that died is restarted
        at the next request, one that gives no answer in time is killed (it must not hang the
        caller)."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
            proc = self._proc
            assert proc.stdin is not None
            try:
                send(proc.stdin, request, self._dumps)
                answer = _answer(proc, wait_s)
            except (EOFError, OSError) as e:
                self._proc = None
                raise ConnectionError(f"{self.what} of {self.gcs_address} died: {e}") from e
            if answer is None:
                self._proc = None
                proc.kill()
                raise TimeoutError(f"{self.what} of {self.gcs_address} gave no answer to "
                                   f"{request[0]} within {wait_s:g} s: restarted")
        status, value = answer
        if status == "missing":
            raise LookupError(value)
        if status != "ok":
            raise RuntimeError(value)
        return value

    def _start(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(self.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                env=self.env, cwd=PACKAGE_ROOT)
        answer = _answer(proc, CONNECT_TIMEOUT_S)
        status, value = answer if answer is not None else ("error", "no answer")
        if status != "ok":
            proc.kill()
            proc.wait(timeout=5)
            raise ConnectionError(f"Ray cluster at {self.gcs_address}: {value}")
        log.info("%s connected to the Ray cluster at %s", self.what, self.gcs_address)
        return proc


def _answer(proc: subprocess.Popen[bytes], wait_s: float) -> Any:
    """The child's next message within ``wait_s``, or None (EOFError when it exited)."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], wait_s)
    return recv(proc.stdout) if ready else None


def serve_requests(connect: Callable[[], Callable[[Any], Any]], dumps: Dumps = pickle.dumps,
                   missing: tuple[type[Exception], ...] = ()) -> int:
    """The child's end: ``connect()`` (which returns the request handler), then one answer per
    request until stdin closes (an exception of ``missing`` answers ``missing``); 1 when it
    could not connect (the parent raises the reason)."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything Ray prints goes to stderr, never into the protocol
    try:
        handle = connect()
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it
        cause = f" ({type(e.__cause__).__name__}: {e.__cause__})" if e.__cause__ else ""
        send(out, ("error", f"{type(e).__name__}: {e}{cause}"), dumps)
        return 1
    send(out, ("ok", None), dumps)
    while True:
        try:
            request = recv(sys.stdin.buffer)
        except EOFError:
            return 0
        try:
            send(out, ("ok", handle(request)), dumps)
        except missing as e:
            send(out, ("missing", str(e)), dumps)
        except Exception as e:  # noqa: BLE001 - the parent raises it
            send(out, ("error", f"{type(e).__name__}: {e}"), dumps)
