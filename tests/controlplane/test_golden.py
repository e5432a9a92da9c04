"""The demo replayed on the stepped clock (``benchmarks.replay``), pinned whole: every job as
stored, every decision, the counters, and digests of every node and event. Any change of what
the control plane decides, bills or records on this scenario fails here, however small.

The file ``golden/demo_replay.json`` is the record of the current behaviour, not hand-computed
numbers (those are in ``test_controller_numbers.py`` and ``test_phases.py``): a change that
means to alter behaviour regenerates it with ``SPOTPLANE_UPDATE_GOLDEN=1 pytest
tests/controlplane/test_golden.py`` and shows the difference in review (``git diff`` of the
file). Ids are random, so each is replaced by its kind and the order it first appears in.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.replay import Replay
from controlplane.reconcile.contracts import ControllerSettings

GOLDEN = Path(__file__).with_name("golden") / "demo_replay.json"
ID = re.compile(r"\b([a-z]+)-([0-9a-f]{12})\b")
WALL_CLOCK = ("reconcile_tick_duration_seconds", "store_transaction_seconds")  # machine speed


def _normalized(parts: dict[str, Any]) -> dict[str, Any]:
    """``parts`` with every random id replaced by ``kind#n`` (n: order of first appearance)."""
    labels: dict[str, str] = {}
    seen: Counter[str] = Counter()

    def label(m: re.Match[str]) -> str:
        if m.group(0) not in labels:
            labels[m.group(0)] = f"{m.group(1)}#{seen[m.group(1)]}"
            seen[m.group(1)] += 1
        return labels[m.group(0)]

    out: dict[str, Any] = json.loads(ID.sub(label, json.dumps(parts)))
    return out


def _digest(items: list[Any]) -> str:
    return hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()


def snapshot(replay: Replay) -> dict[str, Any]:
    """What the replay left in the store, normalized: in full where a reviewer reads it (jobs,
    decisions, counters), as counts and digests where it is long (events, nodes)."""
    store = replay.store
    parts = _normalized({
        "jobs": [store.get_job(i).model_dump(mode="json") for i in replay.ids],
        "decisions": [d.model_dump(mode="json") for d in store.decisions(limit=10**7)],
        "events": [e.model_dump(mode="json") for e in store.events(limit=10**7)],
        "nodes": [n.model_dump(mode="json") for n in store.list_nodes()],
        "counters": {k: v for k, v in sorted(store.metrics().items()) if not k.startswith(WALL_CLOCK)},
    })
    events, nodes = parts.pop("events"), parts.pop("nodes")
    return {**parts,
            "events": {"count": len(events), "digest": _digest(events),
                       "by_kind": dict(sorted(Counter(e["kind"] for e in events).items()))},
            "nodes": {"count": len(nodes), "digest": _digest(sorted(nodes, key=json.dumps)),
                      "by_state": dict(sorted(Counter(n["state"] for n in nodes).items()))}}


def _first_difference(want: Any, got: Any, path: str = "") -> str:
    if isinstance(want, dict) and isinstance(got, dict):
        for k in sorted(set(want) | set(got)):
            if want.get(k) != got.get(k):
                return _first_difference(want.get(k), got.get(k), f"{path}.{k}")
    if isinstance(want, list) and isinstance(got, list):
        for i, (w, g) in enumerate(zip(want, got, strict=False)):
            if w != g:
                return _first_difference(w, g, f"{path}[{i}]")
        if len(want) != len(got):
            return f"{path}: {len(want)} items recorded, {len(got)} now"
    return f"{path}: recorded {want!r}, now {got!r}"


def test_the_demo_replay_is_what_it_was_record_for_record(tmp_path: Path) -> None:
    replay = Replay(7.0, 0, tmp_path, ControllerSettings())
    replay.run()
    got = snapshot(replay)
    replay.store.close()
    if os.environ.get("SPOTPLANE_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    if got != want:
        (tmp_path / "now.json").write_text(json.dumps(got, indent=1, sort_keys=True))
        raise AssertionError(
            f"the demo replay changed: {_first_difference(want, got)}\n(the whole snapshot: "
            f"{tmp_path / 'now.json'}; if the change is meant, SPOTPLANE_UPDATE_GOLDEN=1)")
