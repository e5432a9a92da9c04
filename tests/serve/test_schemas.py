"""422 messages name the field and the fix (no Ray)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from controlplane.core.models import BagSpec, JobSpec
from serve.schemas import error_line, field_errors


def _errors(model: type, body: dict) -> list[str]:
    with pytest.raises(ValidationError) as info:
        model.model_validate(body)
    return [error_line(e) for e in field_errors(info.value.errors())]


def test_deadline_before_compute_names_field_and_fix() -> None:
    lines = _errors(JobSpec, {"name": "x", "kind": "deadline", "compute_hours": 2.0, "deadline_hours": 1.0})
    assert len(lines) == 1
    assert lines[0].startswith("deadline_hours: 1.0 h is less than compute_hours + overhead_hours = 2.05 h")
    assert lines[0].endswith("; raise deadline_hours or lower compute_hours")


def test_builtin_errors_get_a_field_and_a_fix() -> None:
    lines = _errors(JobSpec, {"name": "", "kind": "gpu", "compute_hours": -1, "workers": 0, "colour": "red"})
    assert "name: must have at least 1 characters; give a longer value" in lines
    assert "kind: must be one of 'hp', 'spot' or 'deadline'; use one of 'hp', 'spot' or 'deadline'" in lines
    assert "compute_hours: must be > 0.0; use a value above 0.0" in lines
    assert "workers: must be >= 1; use a value of at least 1" in lines
    assert "colour: is not a field of this request; remove it (the fields are listed at /docs)" in lines


def test_missing_required_field() -> None:
    assert _errors(JobSpec, {"name": "x"}) == ["compute_hours: is required; add `compute_hours` to the request"]


def test_nested_bag_template_error_has_dotted_path() -> None:
    body = {"name": "b", "template": {"name": "t", "compute_hours": 1, "deadline_hours": 3}, "params": [{}]}
    lines = _errors(BagSpec, body)
    assert lines == ["template.deadline_hours: only kind=deadline jobs take a deadline (kind is spot); "
                     "set kind: deadline or drop the deadline"]


def test_list_item_path() -> None:
    body = {"name": "b", "template": {"name": "t", "compute_hours": 1}, "params": [{}, {}],
            "compute_hours": [1.0, "lots"]}
    lines = _errors(BagSpec, body)
    assert lines[0].startswith("compute_hours[1]: ")
    assert lines[0].endswith("; send a number")
