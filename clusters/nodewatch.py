"""The node's own reporter, carried by its bootstrap script: stdlib only, run as ``python3 FILE``.

``watch`` polls the cloud's metadata server for the preemption notice (AWS: IMDSv2
``spot/instance-action``, every 5 s; GCP: ``instance/preempted``, every 2 s) and POSTs it once to
``API/v1/nodes/<instance id>/notice``; ``fail`` POSTs a failed boot with the last lines of the
bootstrap's log to ``API/v1/nodes/<instance id>/boot-failure``. Both send the launch's report
credential (``controlplane.core.nodecreds``) as a bearer token. The bootstrap copies this file
onto the node verbatim (``clusters.bootstrap``), so it imports nothing outside the standard library.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any

DEFAULT_METADATA = {"aws": "http://169.254.169.254", "gcp": "http://metadata.google.internal"}
NOTICE_SECONDS = {"aws": 120.0, "gcp": 30.0}
POLL_SECONDS = {"aws": 5.0, "gcp": 2.0}
TAIL_CHARS = 4000


def _get(url: str, headers: dict[str, str], method: str = "GET", timeout_s: float = 3.0) -> str:
    req = urllib.request.Request(url, headers=headers, method=method)
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return str(resp.read().decode().strip())


def _aws_token(base: str) -> str:
    return _get(f"{base}/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "21600"}, "PUT")


def instance_id(cloud: str, base: str) -> str:
    """This node's id as its fleet provider names it (EC2 ``instance-id``, GCE ``instance/name``)."""
    if cloud == "aws":
        return _get(f"{base}/latest/meta-data/instance-id", {"X-aws-ec2-metadata-token": _aws_token(base)})
    return _get(f"{base}/computeMetadata/v1/instance/name", {"Metadata-Flavor": "Google"})


def notice(cloud: str, base: str, now: float) -> dict[str, Any] | None:
    """One look at the metadata server: the notice (action, seconds left, raw body), or None."""
    try:
        if cloud == "aws":
            body = _get(f"{base}/latest/meta-data/spot/instance-action",
                        {"X-aws-ec2-metadata-token": _aws_token(base)})
        else:
            body = _get(f"{base}/computeMetadata/v1/instance/preempted", {"Metadata-Flavor": "Google"})
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    if cloud == "aws":
        doc = json.loads(body)
        when = datetime.fromisoformat(str(doc["time"]).replace("Z", "+00:00")).timestamp()
        return {"action": str(doc.get("action", "terminate")), "seconds_left": max(0.0, when - now),
                "raw": body}
    if body.upper() != "TRUE":
        return None
    return {"action": "preempted", "seconds_left": NOTICE_SECONDS["gcp"], "raw": body}


def post(api: str, path: str, credential: str, body: dict[str, Any], tries: int = 5) -> int:
    """POST ``body`` as JSON with the credential; retried with backoff; the HTTP status."""
    data = json.dumps(body).encode()
    status = 0
    for attempt in range(tries):
        req = urllib.request.Request(f"{api.rstrip('/')}{path}", data=data, method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {credential}"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            status = exc.code
            if exc.code < 500 and exc.code != 429:
                return status
        except OSError as exc:
            print(f"nodewatch: POST {path} failed: {exc}", file=sys.stderr)
        time.sleep(min(2.0 ** attempt, 10.0))
    return status


def watch(cloud: str, base: str, api: str, credential: str, poll_s: float) -> int:
    """Poll until a notice appears, report it once, and exit 0."""
    iid = instance_id(cloud, base)
    while True:
        try:
            found = notice(cloud, base, time.time())
        except (OSError, ValueError, KeyError) as exc:  # a metadata hiccup: keep watching
            print(f"nodewatch: metadata check failed: {exc}", file=sys.stderr)
            found = None
        if found is not None:
            status = post(api, f"/v1/nodes/{iid}/notice", credential, found)
            print(f"nodewatch: notice {found['action']} reported ({status})", file=sys.stderr)
            return 0
        time.sleep(poll_s)


def fail(cloud: str, base: str, api: str, credential: str, log_path: str, iid: str) -> int:
    """Report a failed boot with the last lines of the bootstrap's log."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            tail = fh.read()[-TAIL_CHARS:]
    except OSError as exc:
        tail = f"(no log: {exc})"
    if not iid:
        try:
            iid = instance_id(cloud, base)
        except OSError as exc:
            print(f"nodewatch: no instance id: {exc}", file=sys.stderr)
            return 1
    status = post(api, f"/v1/nodes/{iid}/boot-failure", credential,
                  {"reason": "bootstrap failed", "log_tail": tail})
    return 0 if 200 <= status < 300 else 1


def main(argv: list[str] | None = None) -> int:
    """``watch`` or ``fail``; the credential is read from a file, never from the command line."""
    parser = argparse.ArgumentParser(prog="nodewatch")
    parser.add_argument("command", choices=["watch", "fail"])
    parser.add_argument("--cloud", choices=sorted(DEFAULT_METADATA), required=True)
    parser.add_argument("--api", required=True)
    parser.add_argument("--credential-file", required=True)
    parser.add_argument("--metadata", default="")
    parser.add_argument("--poll-s", type=float, default=0.0)
    parser.add_argument("--log", default="")
    parser.add_argument("--instance-id", default="")
    args = parser.parse_args(argv)
    base = (args.metadata or DEFAULT_METADATA[args.cloud]).rstrip("/")
    with open(args.credential_file, encoding="utf-8") as fh:
        credential = fh.read().strip()
    if args.command == "watch":
        return watch(args.cloud, base, args.api, credential, args.poll_s or POLL_SECONDS[args.cloud])
    return fail(args.cloud, base, args.api, credential, args.log, args.instance_id)


if __name__ == "__main__":
    sys.exit(main())
