"""The real Controller on AwsFleet over moto's server takes the nodes' own reports from the store:
a failed boot fails the node with its reason, terminates the instance and places the job
elsewhere; a notice makes the node NOTICED before EC2's own signal."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.core.models import JobKind, JobSpec, JobState, NodeState
from tests.clusters import test_aws_controller as ctl_world

aws = ctl_world.aws
moto_port, proxy, aws_env, world = (ctl_world.moto_port, ctl_world.proxy, ctl_world.aws_env,
                                    ctl_world.world)
run = ctl_world.run


def running_job(world: Any) -> tuple[Any, Any]:
    _, clock, store, _, ctl = world
    tenant, _ = store.create_tenant("acme")
    job = store.submit_job(tenant.id, JobSpec(name="train", kind=JobKind.SPOT, compute_hours=4,
                                              workers=1, accelerator="A10G"), now=clock.now())
    run(ctl, clock, 5)
    assert store.get_job(job.id).state is JobState.RUNNING
    [node] = [n for n in store.list_nodes() if n.job_id == job.id]
    return job, node


@pytest.mark.slow
def test_a_failed_boot_fails_the_node_terminates_it_and_places_the_job_elsewhere(world: Any) -> None:
    _, clock, store, _, ctl = world
    job, node = running_job(world)
    store.put_node_report(node.instance_id, "boot_failed", {
        "reason": "bootstrap failed", "log_tail": "line 1\nray start: the token was rejected\n"})
    run(ctl, clock, 1)
    failed = next(n for n in store.list_nodes() if n.id == node.id)
    assert failed.state is NodeState.FAILED
    [event] = [e for e in store.job_events(job.id) if e.node_id == node.id and e.dst == "FAILED"]
    assert event.cause.startswith(f"bootstrap failed on {node.instance_id}:")
    assert event.cause.endswith("ray start: the token was rejected")
    causes = [e.cause for e in store.job_events(job.id)]
    assert aws.moto_backend().get_instance(node.instance_id).state == "terminated"
    run(ctl, clock, 5)
    assert store.get_job(job.id).state is JobState.RUNNING, causes
    [now_on] = [n for n in store.list_nodes() if n.job_id == job.id and n.state is NodeState.READY]
    assert now_on.instance_id != node.instance_id
    run(ctl, clock, 2)  # EC2 reports the instance terminated: the node stays FAILED
    assert next(n for n in store.list_nodes() if n.id == node.id).state is NodeState.FAILED


@pytest.mark.slow
def test_a_nodes_notice_makes_it_noticed(world: Any) -> None:
    _, clock, store, _, ctl = world
    job, node = running_job(world)
    store.put_node_report(node.instance_id, "notice", {"action": "terminate", "seconds_left": 100.0})
    run(ctl, clock, 1)
    assert next(n for n in store.list_nodes() if n.id == node.id).state is NodeState.NOTICED
    assert any("preemption notice" in e.cause for e in store.job_events(job.id))
