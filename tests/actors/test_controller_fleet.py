"""The controller actor assembles the simulated fleet with seed 001's GCE lifetimes (no Ray)."""

from __future__ import annotations

from pathlib import Path

from actors.controller import ControllerActor
from actors.runtime import RuntimeSettings
from policies.preemption import ExponentialModel, default_gce_model


def _actor(tmp_path: Path, **fleet_options: object) -> ControllerActor:
    settings = RuntimeSettings(state_dir=tmp_path, speed=0.0, policy_actors=False,
                               autostart=False, fleet_options=dict(fleet_options))
    return ControllerActor(settings.actor_config())


def test_simulated_fleet_draws_lifetimes_from_the_gce_fit(tmp_path: Path) -> None:
    model, want = _actor(tmp_path).fleet.lifetimes, default_gce_model()
    assert type(model) is type(want) and model.params == want.params
    assert model.max_lifetime == want.max_lifetime


def test_a_given_lifetime_model_is_kept(tmp_path: Path) -> None:
    model = ExponentialModel(rate=0.3, limit=24.0)
    assert _actor(tmp_path, lifetime_model=model).fleet.lifetimes is model
