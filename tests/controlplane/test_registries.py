"""A toy deadline policy and a toy fleet provider, each added by its one decorator, show up where
users choose them (the policy list, ``spotplane up --fleet``) and run when chosen by name."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import pytest

import clusters.providers
import policies.deadline
from clusters.fleet import FleetEvent, FleetProvider, Instance, LaunchRequest, Offer
from clusters.providers import Capability, fleet_provider, make_provider, provider_names, registered
from controlplane.cli.main import build_parser
from controlplane.core.errors import ConfigError
from controlplane.reconcile.policyhost import PolicyBook, PolicyRequest, check_policy, live_policies
from policies.deadline import (
    SPOT,
    Action,
    DeadlineTask,
    Kind,
    Observation,
    deadline_policy,
    policy_names,
    registered_policies,
)


@pytest.fixture(autouse=True)
def _registries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test vanish after it (the real ones are loaded first)."""
    monkeypatch.setattr(policies.deadline, "_REGISTRY", dict(registered_policies()))
    monkeypatch.setattr(clusters.providers, "_REGISTRY", dict(registered()))


def _add_toy_policy() -> type:
    @deadline_policy("toy_always_spot", live=True, ticked=True)
    class AlwaysSpot:
        def __init__(self, task: DeadlineTask, *, tick_hours: float) -> None:
            self.task, self.tick_hours = task, tick_hours

        def decide(self, obs: Observation) -> Action:
            return SPOT

        def state_dict(self) -> dict[str, Any]:
            return {"tick_hours": self.tick_hours}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.tick_hours = state["tick_hours"]

    return AlwaysSpot


def _add_toy_provider() -> type[FleetProvider]:
    @fleet_provider("toy", capabilities=frozenset({Capability.SIMULATED}))
    class ToyFleet(FleetProvider):
        name = "toy"

        def __init__(self, *, zones: Sequence[str] = ("toy-a",)) -> None:
            self.zones = list(zones)

        def offers(self) -> list[Offer]:
            return [Offer("toy", z, "toy.gpu", "T4", 1, 0.1, 0.3) for z in self.zones]

        def spot_available(self, zone: str, instance_type: str) -> bool:
            return True

        def launch(self, request: LaunchRequest) -> list[Instance]:
            return []

        def terminate(self, instance_ids: Sequence[str]) -> None:
            return None

        def describe(self, instance_ids: Sequence[str] | None = None) -> list[Instance]:
            return []

        def poll_events(self) -> list[FleetEvent]:
            return []

    return ToyFleet


def _fleet_choices() -> list[str]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    fleet = next(a for a in sub.choices["up"]._actions if a.dest == "fleet")
    return list(fleet.choices or [])


def test_the_real_policies_and_providers_are_registered() -> None:
    assert {"greedy", "uniform_progress", "spotplane", "spotplane_probing", "semi_markov_dp",
            "omniscient", "partial_lookahead", "up_oracle", "on_demand"} <= set(policy_names())
    assert set(live_policies()) == {"spotplane", "spotplane_probing", "uniform_progress",
                                    "up_eager_failover", "greedy", "time_sliced",
                                    "uniform_progress_loose", "semi_markov_dp", "on_demand",
                                    "spotplane_egress"}
    assert set(provider_names()) == {"sim", "aws", "gcp", "ray", "ray-clusters"} == set(_fleet_choices())


def test_a_toy_policy_is_listed_and_runs_when_a_job_names_it() -> None:
    assert "toy_always_spot" not in live_policies()
    toy = _add_toy_policy()
    assert "toy_always_spot" in live_policies() and check_policy("toy_always_spot") == "toy_always_spot"
    book = PolicyBook()
    obs = Observation(elapsed_hours=0.0, progress_hours=0.0, state=Kind.IDLE, zone="z",
                      spot_available=True)
    req = PolicyRequest("job-1", "toy_always_spot", DeadlineTask(4.0, 10.0, 0.1), obs, tick_hours=0.25)
    assert book.decide([req]) == {"job-1": SPOT}
    assert isinstance(book.policies["job-1"], toy) and book.policies["job-1"].state_dict() == {"tick_hours": 0.25}


def test_a_toy_provider_is_a_fleet_choice_and_is_built_by_name() -> None:
    with pytest.raises(ConfigError, match="unknown provider 'toy'"):
        make_provider("toy")
    toy = _add_toy_provider()
    assert "toy" in provider_names() and "toy" in _fleet_choices()
    fleet = make_provider("toy", zones=["toy-a", "toy-b"])
    assert isinstance(fleet, toy) and [o.zone for o in fleet.offers()] == ["toy-a", "toy-b"]
    assert registered()["toy"].can(Capability.SIMULATED) and not registered()["toy"].can(Capability.NOTICES)
