"""The job state machine refuses illegal moves and names the allowed ones."""

from __future__ import annotations

import pytest

from controlplane.core.errors import Conflict
from controlplane.core.models import (
    TERMINAL_STATES,
    TRANSITIONS,
    IllegalTransition,
    JobState,
    check_transition,
)


def test_happy_path_and_preemption_cycle_are_legal() -> None:
    path = [JobState.PENDING, JobState.QUEUED, JobState.STARTING, JobState.RUNNING,
            JobState.CHECKPOINTING, JobState.RUNNING, JobState.PREEMPTED, JobState.QUEUED,
            JobState.STARTING, JobState.RUNNING, JobState.SUCCEEDED]
    for a, b in zip(path, path[1:], strict=False):
        check_transition("j", a, b)


@pytest.mark.parametrize("src,dst", [
    (JobState.PENDING, JobState.RUNNING),
    (JobState.QUEUED, JobState.SUCCEEDED),
    (JobState.PREEMPTED, JobState.RUNNING),
    (JobState.SUCCEEDED, JobState.QUEUED),
    (JobState.CANCELLED, JobState.RUNNING),
])
def test_illegal_moves_are_refused_with_the_allowed_ones(src: JobState, dst: JobState) -> None:
    with pytest.raises(IllegalTransition) as err:
        check_transition("job-1", src, dst)
    assert isinstance(err.value, Conflict)
    assert f"{src} -> {dst}" in str(err.value)
    assert ("terminal" in str(err.value)) == (src in TERMINAL_STATES)


def test_terminal_states_have_no_exit_and_every_active_state_can_end() -> None:
    for s in TERMINAL_STATES:
        assert TRANSITIONS[s] == frozenset()
    for s in set(JobState) - TERMINAL_STATES:
        assert {JobState.FAILED, JobState.CANCELLED} <= TRANSITIONS[s]
