"""Every transition of a run's lifecycle (msmon/runner/lifecycle.py), and the ending each path gives."""

from __future__ import annotations

import signal

import pytest

from msmon.anomaly import Anomaly, StopRequest
from msmon.runner.lifecycle import Ending, Lifecycle, Phase, SignalAction
from msmon.runner.results import RunResult
from msmon.status import RunStatus

FAILED = RunResult(RunStatus.FAILED, "RuntimeError: boom")
HANG = StopRequest("stall: no training step has ended", "stall", 120)
NAN = StopRequest("loss is NaN", "nonfinite", 5)


def watcher_stop(stop: StopRequest | None) -> RunResult | None:
    """The rank watcher's stop as the supervisor hands it over."""
    return RunResult(RunStatus.STOPPED_BY_MONITOR, stop.reason, stop=stop) if stop is not None else None


def ended(life: Lifecycle, result: RunResult, *, monitor_stop: StopRequest | None = None,
          progressed: bool = True) -> str | None:
    """The cause of the restart or rollback that is due, or None."""
    life.begin_attempt()
    due = life.attempt_ended(result, monitor_stop=watcher_stop(monitor_stop), progressed=progressed)
    return due.cause if due is not None else None


@pytest.mark.parametrize(("result", "monitor_stop", "progressed", "expected"), [
    (RunResult(RunStatus.COMPLETED), None, True, Ending(RunStatus.COMPLETED, None, 0)),
    (FAILED, None, True, Ending(RunStatus.FAILED, "RuntimeError: boom", 3)),
    (FAILED, None, False, Ending(RunStatus.FAILED, "RuntimeError: boom", 3)),  # a config error: never restarted
    (RunResult(RunStatus.INTERRUPTED), HANG, True, Ending(RunStatus.STOPPED_BY_MONITOR, HANG.reason, 4)),
    (RunResult(RunStatus.COMPLETED), NAN, True, Ending(RunStatus.STOPPED_BY_MONITOR, NAN.reason, 4)),
    (RunResult(RunStatus.STOPPED_BY_MONITOR, NAN.reason, stop=NAN), None, True,
     Ending(RunStatus.STOPPED_BY_MONITOR, NAN.reason, 4)),
    (RunResult(RunStatus.INTERRUPTED, "x"), None, True, Ending(RunStatus.INTERRUPTED, None, 130)),
])
def test_an_attempt_without_restarts_ends_the_run(result: RunResult, monitor_stop: StopRequest | None, progressed: bool,
                                                  expected: Ending) -> None:
    life = Lifecycle(max_restarts=0)
    assert life.phase is Phase.STARTING
    assert ended(life, result, monitor_stop=monitor_stop, progressed=progressed) is None
    assert life.phase is Phase.ENDED and life.ending() == expected


@pytest.mark.parametrize(("result", "monitor_stop", "progressed", "due"), [
    (FAILED, None, True, "failed: RuntimeError: boom"),
    (RunResult(RunStatus.INTERRUPTED), HANG, True, f"was stopped by the monitor for a hang: {HANG.reason}"),
    (FAILED, None, False, None),  # failed before its first step: a configuration error
    (RunResult(RunStatus.INTERRUPTED), NAN, True, None),  # another detector's stop
    (RunResult(RunStatus.COMPLETED), None, True, None),
])
def test_a_restart_is_due_only_after_progress_or_for_a_hang(result: RunResult, monitor_stop: StopRequest | None,
                                                            progressed: bool, due: str | None) -> None:
    life = Lifecycle(max_restarts=2)
    assert ended(life, result, monitor_stop=monitor_stop, progressed=progressed) == due
    assert life.phase is (Phase.BACKING_OFF if due else Phase.ENDED)
    assert life.restarts == (1 if due else 0)


def test_restarts_run_out_then_the_last_attempt_ends_the_run() -> None:
    life = Lifecycle(max_restarts=1)
    assert ended(life, FAILED) == "failed: RuntimeError: boom"
    assert ended(life, FAILED) is None  # the one restart is used
    assert life.unrestarted == "failed: RuntimeError: boom" and life.restarts == 1
    assert life.ending() == Ending(RunStatus.FAILED, "RuntimeError: boom", 3)


def test_a_restarted_attempt_that_completes_ends_the_run_completed() -> None:
    life = Lifecycle(max_restarts=3)
    assert ended(life, RunResult(RunStatus.INTERRUPTED), monitor_stop=HANG)
    assert ended(life, RunResult(RunStatus.COMPLETED)) is None
    assert life.ending() == Ending(RunStatus.COMPLETED, None, 0) and life.restarts == 1


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_forbids_restarts_and_makes_the_run_interrupted(signum: int, code: int) -> None:
    life = Lifecycle(max_restarts=3)
    life.begin_attempt()
    assert life.signalled(signum, signal.Signals(signum).name) is SignalAction.STOP
    assert life.attempt_ended(FAILED, monitor_stop=None, progressed=True) is None  # a failure while stopping
    assert life.ending() == Ending(RunStatus.FAILED, "RuntimeError: boom", 3)  # a failure stays a failure
    other = Lifecycle(max_restarts=3)
    other.begin_attempt()
    other.signalled(signum, "X")
    other.attempt_ended(RunResult(RunStatus.INTERRUPTED), monitor_stop=watcher_stop(HANG), progressed=True)
    assert other.ending() == Ending(RunStatus.INTERRUPTED, None, code)


def test_a_second_signal_names_itself_and_a_third_changes_nothing() -> None:
    life = Lifecycle(max_restarts=0)
    life.begin_attempt()
    actions = [life.signalled(signal.SIGINT, "SIGINT"), life.signalled(signal.SIGTERM, "SIGTERM"),
               life.signalled(signal.SIGTERM, "SIGTERM")]
    assert actions == [SignalAction.STOP, SignalAction.FORCE, SignalAction.NONE]
    assert life.signal == signal.SIGINT and life.forced_by == "SIGTERM"
    life.attempt_ended(RunResult(RunStatus.INTERRUPTED), monitor_stop=None, progressed=True)
    assert life.ending() == Ending(RunStatus.INTERRUPTED, "forced by a second SIGTERM", 130)


def test_a_signal_in_the_back_off_ends_the_run_interrupted() -> None:
    life = Lifecycle(max_restarts=1)
    assert ended(life, FAILED)
    life.signalled(signal.SIGTERM, "SIGTERM")
    life.backoff_interrupted()
    assert life.phase is Phase.ENDED and life.ending() == Ending(RunStatus.INTERRUPTED, None, 143)


def test_transitions_out_of_order_are_refused() -> None:
    life = Lifecycle(max_restarts=0)
    with pytest.raises(RuntimeError):
        life.attempt_ended(FAILED, monitor_stop=None, progressed=True)  # nothing is training
    with pytest.raises(RuntimeError):
        life.ending()  # not ended
    with pytest.raises(RuntimeError):
        life.backoff_interrupted()
    life.begin_attempt()
    with pytest.raises(RuntimeError):
        life.begin_attempt()  # one attempt at a time


ANOMALY = Anomaly("loss_spike", 150, 152, "loss spike")
SPIKE = StopRequest("loss spike", "loss_spike", 152, ANOMALY)
ROLL = RunResult(RunStatus.STOPPED_BY_MONITOR, SPIKE.reason, stop=SPIKE)


def test_a_rollback_is_due_for_an_anomaly_until_none_is_left() -> None:
    life = Lifecycle(max_restarts=0, max_rollbacks=2)
    for used in (1, 2):
        life.begin_attempt()
        due = life.attempt_ended(ROLL, monitor_stop=None, progressed=True)
        assert due is not None and due.anomaly == ANOMALY and life.rollbacks == used
        assert due.cause == f"was stopped by the monitor for a rollback: {SPIKE.reason}"
    assert ended(life, ROLL) is None
    assert life.ending() == Ending(RunStatus.STOPPED_BY_MONITOR, f"{SPIKE.reason}; not rolled back: no rollback left "
                                                                 "(2 of 2 used)", 4)


def test_the_rank_watchers_rollback_stop_is_a_rollback_too() -> None:
    life = Lifecycle(max_restarts=0, max_rollbacks=1)
    life.begin_attempt()
    due = life.attempt_ended(RunResult(RunStatus.INTERRUPTED), monitor_stop=ROLL, progressed=True)
    assert due is not None and due.anomaly == ANOMALY and life.phase is Phase.BACKING_OFF


def test_a_rollback_without_a_checkpoint_ends_the_run_stopped_and_says_why() -> None:
    life = Lifecycle(max_restarts=3, max_rollbacks=3)
    assert ended(life, ROLL)
    life.rollback_impossible("no complete checkpoint before step 150")
    assert life.rollbacks == 0 and life.phase is Phase.ENDED
    assert life.ending() == Ending(RunStatus.STOPPED_BY_MONITOR,
                                   f"{SPIKE.reason}; not rolled back: no complete checkpoint before step 150", 4)
    with pytest.raises(RuntimeError):
        life.rollback_impossible("twice")


def test_no_rollback_after_a_signal_and_none_without_the_budget() -> None:
    life = Lifecycle(max_restarts=3, max_rollbacks=3)
    life.begin_attempt()
    life.signalled(signal.SIGINT, "SIGINT")
    assert life.attempt_ended(ROLL, monitor_stop=None, progressed=True) is None
    assert life.ending() == Ending(RunStatus.INTERRUPTED, None, 130)
    none_left = Lifecycle(max_restarts=3)  # max_rollbacks 0: a rollback action alone stops the run
    assert ended(none_left, ROLL) is None and none_left.ending().exit_code == 4
