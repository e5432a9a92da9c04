"""Preemption-notice watchers against local HTTP servers playing the AWS and GCE metadata servers."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from clusters.aws.notices import AwsSpotNoticeWatcher
from clusters.gcp.notices import GcpPreemptionWatcher
from clusters.notices import NoticeWatch, PreemptionNotice
from clusters.providers import instance_identity, watcher_for
from controlplane.core.clock import SimClock, WallClock
from controlplane.core.errors import CloudError, InvalidInput
from tests.support import wait_until


class MetadataState:
    """What both fake metadata servers serve; the test flips ``notice_at``/``preempted``."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.notice_at: datetime | None = None  # AWS
        self.action = "terminate"
        self.preempted = False  # GCP
        self.instance_id = "i-0f3a9c2e7b1d4a6c8"  # AWS latest/meta-data/instance-id
        self.instance_name = "sp-a10g-3f9c-0"  # GCE instance/name
        self.etag = 1
        self.tokens: list[str] = []
        self.requests: list[tuple[str, str, dict[str, str]]] = []

    def set_preempted(self) -> None:
        with self.cond:
            self.preempted = True
            self.etag += 1
            self.cond.notify_all()


def handler_for(state: MetadataState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def reply(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
            data = body.encode()
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self) -> None:
            state.requests.append(("PUT", self.path, {k.lower(): v for k, v in self.headers.items()}))
            ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
            if self.path != "/latest/api/token" or not ttl:
                self.reply(400, "Bad Request")
                return
            token = f"AQAEA-token-{len(state.tokens)}"
            state.tokens.append(token)
            self.reply(200, token, {"X-aws-ec2-metadata-token-ttl-seconds": ttl})

        def do_GET(self) -> None:
            state.requests.append(("GET", self.path, {k.lower(): v for k, v in self.headers.items()}))
            if self.path.startswith("/latest/"):
                self.aws()
            else:
                self.gcp()

        def aws(self) -> None:
            if self.headers.get("X-aws-ec2-metadata-token") not in state.tokens[-1:]:
                self.reply(401, "Unauthorized")
                return
            if self.path == "/latest/meta-data/instance-id":
                self.reply(200, state.instance_id, {"Content-Type": "text/plain"})
                return
            if self.path != "/latest/meta-data/spot/instance-action" or state.notice_at is None:
                self.reply(404, "Not Found")
                return
            stamp = state.notice_at.strftime("%Y-%m-%dT%H:%M:%SZ")
            self.reply(200, json.dumps({"action": state.action, "time": stamp}))

        def gcp(self) -> None:
            if self.headers.get("Metadata-Flavor") != "Google":
                self.reply(403, "Missing Metadata-Flavor:Google header.")
                return
            path, _, query = self.path.partition("?")
            if path == "/computeMetadata/v1/instance/name":
                self.reply(200, state.instance_name, {"Metadata-Flavor": "Google", "Content-Type": "application/text"})
                return
            if path != "/computeMetadata/v1/instance/preempted":
                self.reply(404, "Not Found")
                return
            params = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
            with state.cond:
                if params.get("wait_for_change") == "true" and params.get("last_etag", "") in ("", str(state.etag)):
                    state.cond.wait_for(lambda: str(state.etag) != params.get("last_etag", str(state.etag - 1))
                                        and state.preempted, timeout=float(params.get("timeout_sec", 60)))
                body, etag = ("TRUE" if state.preempted else "FALSE"), str(state.etag)
            self.reply(200, body, {"ETag": etag, "Metadata-Flavor": "Google", "Content-Type": "application/text"})

    return Handler


@contextmanager
def serve_metadata() -> Iterator[tuple[MetadataState, str]]:
    """Both fake metadata servers on one free port (AWS paths under /latest, GCE under /computeMetadata)."""
    state = MetadataState()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        with state.cond:
            state.preempted = True
            state.etag += 1
            state.cond.notify_all()  # release hanging GETs
        server.shutdown()
        server.server_close()


@pytest.fixture
def metadata() -> Iterator[tuple[MetadataState, str]]:
    with serve_metadata() as served:
        yield served


def test_aws_no_notice_is_404_then_the_notice(metadata: tuple[MetadataState, str]) -> None:
    state, url = metadata
    clock = SimClock(start=datetime(2026, 1, 5, 12, 0, tzinfo=UTC).timestamp())
    watcher = AwsSpotNoticeWatcher(url, clock=clock)
    assert watcher.check() is None
    state.notice_at = datetime(2026, 1, 5, 12, 2, tzinfo=UTC)
    notice = watcher.check()
    assert notice is not None and (notice.cloud, notice.action, notice.seconds_left) == ("aws", "terminate", 120.0)
    assert notice.at == clock.now()
    # IMDSv2: every GET carried the session token from one PUT
    gets = [h for m, p, h in state.requests if m == "GET"]
    assert len(state.tokens) == 1 and all(h["x-aws-ec2-metadata-token"] == state.tokens[0] for h in gets)
    assert [h["x-aws-ec2-metadata-token-ttl-seconds"] for m, _, h in state.requests if m == "PUT"] == ["21600"]


def test_aws_expired_token_is_renewed(metadata: tuple[MetadataState, str]) -> None:
    state, url = metadata
    watcher = AwsSpotNoticeWatcher(url, clock=SimClock())
    assert watcher.check() is None
    state.tokens.append("rotated-by-imds")  # the watcher's token is no longer valid
    state.notice_at = datetime.now(UTC) + timedelta(minutes=2)
    assert watcher.check() is not None
    assert len(state.tokens) == 3  # 401 -> a fresh PUT -> success


def test_gcp_needs_the_flavor_header_and_reads_false(metadata: tuple[MetadataState, str]) -> None:
    state, url = metadata
    watcher = GcpPreemptionWatcher(url, clock=SimClock())
    assert watcher.check() is None and watcher.etag == "1"
    assert all(h.get("metadata-flavor") == "Google" for _, _, h in state.requests)


def test_gcp_hanging_get_returns_when_preempted(metadata: tuple[MetadataState, str]) -> None:
    state, url = metadata
    clock = SimClock(start=100.0)
    fired: list[PreemptionNotice] = []
    watch = NoticeWatch(GcpPreemptionWatcher(url, clock=clock), fired.append).start()
    wait_until(lambda: any("wait_for_change=true" in p for _, p, _ in state.requests), 30, "the hanging GET")
    assert fired == [] and watch.running  # hanging, no notice yet
    state.set_preempted()
    watch.stop()
    assert fired == [PreemptionNotice("gcp", "preempted", 100.0, 30.0, "TRUE")]
    hanging = [p for _, p, _ in state.requests if "wait_for_change=true" in p]
    assert hanging and "last_etag=1" in hanging[0]


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_notice_arrives_mid_checkpoint(metadata: tuple[MetadataState, str], cloud: str) -> None:
    """A checkpoint is being written when the notice comes: the callback fires at once, mid-write."""
    state, url = metadata
    chunks_total, written = 3000, [0]  # a minute at most: the notice ends it early
    fired: list[tuple[int, PreemptionNotice]] = []
    urgent = threading.Event()

    def on_notice(notice: PreemptionNotice) -> None:  # what the node agent does: tell, flush
        fired.append((written[0], notice))
        urgent.set()

    watcher = (AwsSpotNoticeWatcher(url, clock=WallClock(), poll_s=0.01) if cloud == "aws"
               else GcpPreemptionWatcher(url, clock=WallClock()))
    watch = NoticeWatch(watcher, on_notice).start()
    flipped_at = None
    for chunk in range(chunks_total):  # the checkpoint: chunks of ~20 ms
        if chunk == 10:
            flipped_at = chunk
            if cloud == "aws":
                state.notice_at = datetime.now(UTC) + timedelta(minutes=2)
            else:
                state.set_preempted()
        urgent.wait(0.02)
        written[0] = chunk + 1
        if urgent.is_set():
            break  # the writer learns of the notice and finishes early
    watch.stop()
    assert flipped_at == 10 and len(fired) == 1
    seen_at, notice = fired[0]
    assert 10 <= seen_at < chunks_total  # during the checkpoint, not after it
    assert written[0] < chunks_total  # the checkpoint heard it before it finished
    assert notice.cloud == cloud
    expected_left = 120.0 if cloud == "aws" else 30.0
    assert expected_left - 5 < notice.seconds_left <= expected_left


def test_watcher_for_and_bad_input() -> None:
    assert isinstance(watcher_for("aws"), AwsSpotNoticeWatcher)
    assert isinstance(watcher_for("gcp", "http://127.0.0.1:1"), GcpPreemptionWatcher)
    with pytest.raises(InvalidInput, match="cloud"):
        watcher_for("azure")
    with pytest.raises(InvalidInput, match="poll_s"):
        AwsSpotNoticeWatcher(poll_s=0)


def test_watch_stops_cleanly_without_a_notice(metadata: tuple[MetadataState, str]) -> None:
    _, url = metadata
    fired: list[PreemptionNotice] = []
    watch = NoticeWatch(AwsSpotNoticeWatcher(url, poll_s=0.01), fired.append).start()
    time.sleep(0.05)
    watch.stop()
    assert not watch.running and fired == []


def test_instance_identity_is_what_the_fleets_call_the_instance(metadata: tuple[MetadataState, str]) -> None:
    """AWS: IMDSv2 token then instance-id (EC2 InstanceId); GCP: instance/name with the flavor header."""
    state, url = metadata
    assert instance_identity("aws", url) == "i-0f3a9c2e7b1d4a6c8"
    get = [(p, h) for m, p, h in state.requests if m == "GET"]
    assert get == [("/latest/meta-data/instance-id", get[0][1])]
    assert get[0][1]["x-aws-ec2-metadata-token"] == state.tokens[0]
    assert instance_identity("gcp", url) == "sp-a10g-3f9c-0"
    assert state.requests[-1][1] == "/computeMetadata/v1/instance/name"
    assert state.requests[-1][2]["metadata-flavor"] == "Google"
    state.instance_name = ""
    with pytest.raises(CloudError, match="empty instance id"):
        instance_identity("gcp", url)
    with pytest.raises(InvalidInput, match="cloud"):
        instance_identity("azure", url)
