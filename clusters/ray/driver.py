"""A child process, driver of one Ray cluster, that asks that cluster's autoscaler for resources.

``ray.autoscaler.sdk.request_resources`` needs a driver of the cluster it asks, and a process is
a driver of one Ray at a time (the controller's is the control plane's). :class:`ClusterDriver`
is a child process (``python -m clusters.ray.driver GCS``, started with a minimal environment)
that is a driver of that one cluster and answers length-prefixed pickled requests on its
stdin/stdout (:mod:`clusters.childdriver`). Given the cluster's cloud, the child also
keeps a preemption-notice watcher on each alive node of its cluster
(:class:`~clusters.ray.nodewatch.ClusterNoticeWatch`) and hands their notices over when asked.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clusters.childdriver import PACKAGE_ROOT, DriverChild, serve_requests
from clusters.ray.nodewatch import ClusterNoticeWatch

ANSWER_TIMEOUT_S = 60.0  # the child answers a request within this, or is restarted
KEEP_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME",
            "VIRTUAL_ENV", "HOME")


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


class ClusterDriver(DriverChild):
    """``request_resources`` on the Ray cluster at ``gcs_address``, through a child process that
    is its driver (started at the first request, restarted when it died or hung)."""

    what = "autoscaler driver"

    def __init__(self, gcs_address: str, token_path: str | None = None, *,
                 python: str = sys.executable, notice_cloud: str | None = None,
                 metadata_url: str | None = None) -> None:
        super().__init__(gcs_address, driver_env(token_path), python=python)
        self.notice_cloud, self.metadata_url = notice_cloud, metadata_url

    def request(self, bundles: list[dict[str, float]]) -> None:
        """Replace the cluster's standing resource request with ``bundles``."""
        self.exchange(("request", [bundles]), ANSWER_TIMEOUT_S)

    def notices(self) -> list[tuple[str, float]]:
        """The (Ray node id, seconds left) notices the cluster's nodes reported since the last
        call (none when the child watches no notices)."""
        if self.notice_cloud is None:
            return []
        return list(self.exchange(("notices", []), ANSWER_TIMEOUT_S))

    def command(self) -> list[str]:
        """How the child is started."""
        cmd = [self.python, "-m", "clusters.ray.driver", self.gcs_address]
        if self.notice_cloud is not None:
            cmd += ["--notice-cloud", self.notice_cloud]
        if self.metadata_url is not None:
            cmd += ["--metadata-url", self.metadata_url]
        return cmd


def _request(bundles: list[dict[str, float]]) -> None:
    from ray.autoscaler.sdk import request_resources

    request_resources(bundles=bundles)


def serve(gcs_address: str, notice_cloud: str | None = None, metadata_url: str | None = None) -> int:
    """The child: connect to the cluster (and watch its nodes' notices when given their cloud),
    then answer requests until stdin closes."""
    import ray

    watch: list[ClusterNoticeWatch] = []

    def connect() -> Callable[[Any], Any]:
        ray.init(address=gcs_address, log_to_driver=False, configure_logging=False)
        if notice_cloud is not None:
            watch.append(_watch(notice_cloud, metadata_url))
        ops: dict[str, Callable[..., Any]] = {"request": _request,
                                              "notices": watch[0].take if watch else list}
        return lambda request: ops[request[0]](*request[1])

    rc = serve_requests(connect)
    for w in watch:
        w.stop()
    if rc == 0:
        ray.shutdown()
    return rc


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
