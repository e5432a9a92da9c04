"""A NodeActor runs the metadata watcher and tells the controller and checkpoint actors at once."""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.node import NodeActor


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"spotplane_tests_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


servers = _load("test_notices")  # the fake metadata servers


class Listener:
    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def preemption_notice(self, instance_id: str, seconds_left: float) -> None:
        self.calls.append((instance_id, seconds_left))


def wait_for(pred: Any, limit: float = 10.0) -> bool:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def meta() -> Iterator[tuple[Any, str]]:
    with servers.serve_metadata() as served:
        yield served


def test_node_actor_tells_controller_and_checkpointer(meta: tuple[Any, str]) -> None:
    state, url = meta
    controller, checkpointer = Listener(), Listener()
    node = NodeActor("n-7", "i-0abc")
    node.watch_metadata("gcp", [(controller, "preemption_notice"), (checkpointer, "preemption_notice")],
                        base_url=url)
    assert wait_for(lambda: any("wait_for_change" in p for _, p, _ in state.requests))
    assert controller.calls == [] and not node.health()["noticed"]
    state.set_preempted()
    assert wait_for(lambda: controller.calls and checkpointer.calls)
    node.stop_watching()
    assert controller.calls == checkpointer.calls == [("i-0abc", 30.0)]
    health = node.health()
    assert health["noticed"] and health["notices"][0]["source"] == "gcp-metadata"


@pytest.mark.ray
@pytest.mark.slow
def test_remote_node_actor_notifies_actors(ray_cluster: Any, meta: tuple[Any, str]) -> None:
    import ray

    from actors.node import RemoteNodeActor

    remote_listener: Any = ray.remote(num_cpus=0)(Listener)
    remote_node: Any = RemoteNodeActor

    state, url = meta
    controller, checkpointer = remote_listener.remote(), remote_listener.remote()
    node = remote_node.remote("n-9", "sp-1234-0")
    try:
        ray.get(node.watch_metadata.remote("gcp", [(controller, "preemption_notice"),
                                                   (checkpointer, "preemption_notice")], url))
        assert wait_for(lambda: any("wait_for_change" in p for _, p, _ in state.requests))
        state.set_preempted()
        got = lambda h: ray.get(h.__ray_call__.remote(lambda self: list(self.calls)))  # noqa: E731
        assert wait_for(lambda: got(controller) and got(checkpointer), limit=20)
        assert got(controller) == got(checkpointer) == [("sp-1234-0", 30.0)]
        assert ray.get(node.health.remote())["noticed"]
        ray.get(node.stop_watching.remote())
    finally:
        for actor in (node, controller, checkpointer):
            ray.kill(actor)
