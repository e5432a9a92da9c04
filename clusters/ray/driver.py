"""A child process, driver of one Ray cluster, that asks that cluster's autoscaler for resources.

``ray.autoscaler.sdk.request_resources`` needs a driver of the cluster it asks, and a process is
a driver of one Ray at a time (the controller's is the control plane's). :class:`ClusterDriver`
is a child process (``python -m clusters.ray.driver GCS``, started with a minimal environment)
that is a driver of that one cluster and answers length-prefixed pickled requests on its
stdin/stdout, the framing of :mod:`actors.actorbridge`. Given the cluster's cloud, the child also
keeps a preemption-notice watcher on each alive node of its cluster
(:class:`~clusters.ray.nodewatch.ClusterNoticeWatch`) and hands their notices over when asked.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import select
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clusters.frames import recv, send
from clusters.ray.nodewatch import ClusterNoticeWatch

log = logging.getLogger(__name__)

ANSWER_TIMEOUT_S = 60.0  # the child answers a request within this, or is restarted
CONNECT_TIMEOUT_S = 120.0  # the child is a driver of the cluster within this, or is refused
KEEP_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME",
            "VIRTUAL_ENV", "HOME")
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # where ``python -m clusters.ray.driver`` resolves


def driver_env(token_path: str | None) -> dict[str, str]:
    """The child's environment: system basics only (no secret, no ``RAY_ADDRESS`` of the
    control plane's Ray); Ray authenticates with the cluster's own token file when it has one."""
    env = {k: v for k, v in os.environ.items() if k in KEEP_ENV}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(PACKAGE_ROOT)
    if token_path is None:
        env["RAY_AUTH_MODE"] = "disabled"
    else:
        env["RAY_AUTH_MODE"] = "token"
        env["RAY_AUTH_TOKEN_PATH"] = str(Path(token_path).expanduser())
    return env


class ClusterDriver:
    """``request_resources`` on the Ray cluster at ``gcs_address``, through a child process that
    is its driver (started at the first request, restarted when it died or hung)."""

    def __init__(self, gcs_address: str, token_path: str | None = None, *,
                 python: str = sys.executable, notice_cloud: str | None = None,
                 metadata_url: str | None = None) -> None:
        self.gcs_address = gcs_address
        self.python = python
        self.notice_cloud, self.metadata_url = notice_cloud, metadata_url
        self.env = driver_env(token_path)
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def request(self, bundles: list[dict[str, float]]) -> None:
        """Replace the cluster's standing resource request with ``bundles``."""
        self._ask("request", bundles)

    def notices(self) -> list[tuple[str, float]]:
        """The (Ray node id, seconds left) notices the cluster's nodes reported since the last
        call (none when the child watches no notices)."""
        if self.notice_cloud is None:
            return []
        return list(self._ask("notices"))

    def command(self) -> list[str]:
        """How the child is started."""
        cmd = [self.python, "-m", "clusters.ray.driver", self.gcs_address]
        if self.notice_cloud is not None:
            cmd += ["--notice-cloud", self.notice_cloud]
        if self.metadata_url is not None:
            cmd += ["--metadata-url", self.metadata_url]
        return cmd

    def close(self) -> None:
        """Stop the child (its standing request stays with the cluster's autoscaler)."""
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

    def _start(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(self.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self.env,
                                cwd=PACKAGE_ROOT)
        assert proc.stdout is not None
        answer = self._answer(proc, CONNECT_TIMEOUT_S)
        status, value = answer if answer is not None else ("error", "no answer")
        if status != "ok":
            proc.kill()
            proc.wait(timeout=5)
            raise ConnectionError(f"Ray cluster at {self.gcs_address}: {value}")
        log.info("autoscaler driver connected to the Ray cluster at %s", self.gcs_address)
        return proc

    @staticmethod
    def _answer(proc: subprocess.Popen[bytes], wait_s: float) -> Any:
        """The child's next message within ``wait_s``, or None."""
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], wait_s)
        return recv(proc.stdout) if ready else None

    def _ask(self, op: str, *args: Any) -> Any:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
            proc = self._proc
            assert proc.stdin is not None
            try:
                send(proc.stdin, (op, args))
                answer = self._answer(proc, ANSWER_TIMEOUT_S)
            except (EOFError, OSError) as e:
                self._proc = None
                raise ConnectionError(f"autoscaler driver of {self.gcs_address} died: {e}") from e
            if answer is None:
                self._proc = None
                proc.kill()
                raise TimeoutError(f"autoscaler driver of {self.gcs_address} gave no answer to "
                                   f"{op} within {ANSWER_TIMEOUT_S:g} s: restarted")
        status, value = answer
        if status != "ok":
            raise RuntimeError(value)
        return value


def _request(bundles: list[dict[str, float]]) -> None:
    from ray.autoscaler.sdk import request_resources

    request_resources(bundles=bundles)


def serve(gcs_address: str, notice_cloud: str | None = None, metadata_url: str | None = None) -> int:
    """The child: connect to the cluster (and watch its nodes' notices when given their cloud),
    then answer requests until stdin closes."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything Ray prints goes to stderr, never into the protocol
    try:
        import ray

        ray.init(address=gcs_address, log_to_driver=False, configure_logging=False)
        watch = None if notice_cloud is None else _watch(notice_cloud, metadata_url)
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it
        cause = f" ({type(e.__cause__).__name__}: {e.__cause__})" if e.__cause__ else ""
        send(out, ("error", f"{type(e).__name__}: {e}{cause}"))
        return 1
    ops: dict[str, Callable[..., Any]] = {"request": _request,
                                          "notices": watch.take if watch is not None else list}
    send(out, ("ok", None))
    while True:
        try:
            op, args = recv(sys.stdin.buffer)
        except EOFError:
            break
        try:
            send(out, ("ok", ops[op](*args)))
        except Exception as e:  # noqa: BLE001 - the parent raises it
            send(out, ("error", f"{type(e).__name__}: {e}"))
    if watch is not None:
        watch.stop()
    ray.shutdown()
    return 0


def _watch(cloud: str, metadata_url: str | None) -> ClusterNoticeWatch:
    return ClusterNoticeWatch(cloud, metadata_url).start()


def main(argv: list[str]) -> int:
    """``python -m clusters.ray.driver GCS [--notice-cloud CLOUD] [--metadata-url URL]``."""
    parser = argparse.ArgumentParser(prog="clusters.ray.driver")
    parser.add_argument("gcs_address")
    parser.add_argument("--notice-cloud", default=None)
    parser.add_argument("--metadata-url", default=None)
    args = parser.parse_args(argv)
    return serve(args.gcs_address, args.notice_cloud, args.metadata_url)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
