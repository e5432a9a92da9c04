"""The chaos benchmark's verdict on a job whose raylet was killed: only a later attempt that
restored a checkpoint (``starting at step K``, K > 0, in its own logs) counts as resumed."""

from __future__ import annotations

from benchmarks.chaos import resumed


def logs(*attempts: tuple[int, str]) -> str:
    return "".join(f"=== attempt {n} of job-1 (replica r0 on node n-{n}) ===\n{text}\n"
                   for n, text in attempts)


def test_a_later_attempt_that_restored_a_checkpoint_is_resumed() -> None:
    text = logs((1, "starting at step 0 of 2400\nstep 300"), (2, "starting at step 280 of 2400"))
    assert resumed(text, after_attempt=1)


def test_a_later_attempt_from_step_zero_is_not_resumed() -> None:
    text = logs((1, "starting at step 0 of 2400\nstep 300"), (2, "starting at step 0 of 2400"))
    assert not resumed(text, after_attempt=1)


def test_the_killed_attempt_itself_never_counts() -> None:
    text = logs((1, "starting at step 0 of 2400"), (2, "starting at step 280 of 2400"))
    assert not resumed(text, after_attempt=2)
    assert not resumed("", after_attempt=0)
