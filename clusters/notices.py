"""On-node preemption notices: the cloud's metadata server says "this VM goes away soon".

Each cloud's watcher lives in its package (``clusters/aws/notices.py``,
``clusters/gcp/notices.py``) and is registered with its provider
(``clusters.providers.watcher_for``); the node's own identity comes from the same server
(``clusters.providers.instance_identity``), the ``Instance.id`` its fleet provider reports.

A :class:`NoticeWatch` runs one watcher on a daemon thread and calls the callback once, at
once, from that thread, whatever the node is doing (e.g. writing a checkpoint).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PreemptionNotice:
    """The metadata server's notice: what will happen and how long is left (control-plane clock)."""

    cloud: str
    action: str
    at: float
    seconds_left: float
    raw: str = ""


class NoticeWatcher(Protocol):
    cloud: str

    def instance_id(self) -> str:
        """This node's instance id as its cloud's fleet provider names it."""
        ...

    def wait(self, stop: threading.Event) -> PreemptionNotice | None:
        """Block until a notice arrives (returned) or ``stop`` is set (None)."""
        ...


class NoticeWatch:
    """Runs a watcher on a daemon thread; ``on_notice`` fires once, from that thread, at once."""

    def __init__(self, watcher: NoticeWatcher, on_notice: Callable[[PreemptionNotice], None]) -> None:
        self.watcher = watcher
        self.on_notice = on_notice
        self.notice: PreemptionNotice | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{watcher.cloud}-notice-watch", daemon=True)

    def start(self) -> NoticeWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        notice = self.watcher.wait(self._stop)
        if notice is None:
            return
        self.notice = notice
        log.warning("preemption notice from %s metadata: %s, %.0fs left", notice.cloud, notice.action,
                    notice.seconds_left)
        try:
            self.on_notice(notice)
        except Exception:  # the callback's failure must not go unseen
            log.exception("preemption notice callback failed")

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()
