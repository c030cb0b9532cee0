"""The lifecycle of one ``msmon run``: its attempts, its restarts, its final status and exit code, decided here and
nowhere else.

    STARTING --begin_attempt--> TRAINING --attempt_ended--> ENDED
                                   ^            |
                                   |            +--(a restart is due)--> BACKING_OFF --begin_attempt--> TRAINING
                                   |                                          |
                                   +------------------------------------------+--backoff_interrupted--> ENDED

An attempt's result (runner.results.decide over its ranks) is judged first: a stop the parent's rank watcher asked
for makes an interrupted or completed attempt ``stopped_by_monitor``. A rollback is due (``health.rollback``) when a
detector whose action is ``rollback`` stopped it (or flagged the attempt's very last step), no signal was received and
a rollback is left; when none is left, or the attempt loop finds no checkpoint before the anomaly
(``rollback_impossible``), the run ends stopped by the monitor (exit 4) with the reason in its error (completed, noted,
when the anomaly was at the last step); when no data is left after the bad window (``data_exhausted``), the run ends
completed, its data exhausted. A restart is due (``--max-restarts`` left, no
signal received) when the attempt failed after training at least one step past where it started, or the monitor
stopped it for a hang; never after a configuration error, a user's signal, or another detector's stop. The final
status: a signal makes anything but a failure or a completion ``interrupted`` (a second one names itself in the
error); the exit code is ``msmon.status.exit_code`` of it and of the signal.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from msmon.anomaly import Anomaly
from msmon.errors import ExitCode
from msmon.runner.results import RunResult
from msmon.status import RunStatus, exit_code


class SignalAction(StrEnum):
    """What a user's signal asks of the training: the first stops it at the next step end, the second forces it (the
    ranks flush and exit now); any later one changes nothing."""

    STOP = "stop"
    FORCE = "force"
    NONE = "none"


class Phase(StrEnum):
    STARTING = "starting"
    TRAINING = "training"
    BACKING_OFF = "backing_off"
    ENDED = "ended"


@dataclass(frozen=True)
class Ending:
    """How the run ends: its status, the one-line error (None unless it failed or was stopped) and exit code."""

    status: RunStatus
    error: str | None
    exit_code: ExitCode
    killed_by: int | None = None  # the signal that killed the last attempt's training process (it failed so)
    note: str | None = None  # how a completed run ended other than at its last step (its data exhausted)


@dataclass(frozen=True)
class NextAttempt:
    """Why the run trains again: an automatic restart (``anomaly`` None), or a rollback for ``anomaly``."""

    cause: str
    anomaly: Anomaly | None = None


def judge(result: RunResult, monitor_stop: RunResult | None) -> RunResult:
    """An attempt's result as the run sees it: the rank watcher's stop (``stopped_by_monitor``) when it stopped it."""
    if monitor_stop is not None and result.status in (RunStatus.INTERRUPTED, RunStatus.COMPLETED):
        return monitor_stop
    return result


def restart_cause(result: RunResult, *, progressed: bool) -> str | None:
    """Why an attempt that ended with ``result`` deserves a restart, or None."""
    if result.status is RunStatus.FAILED and progressed:
        return f"failed: {result.error}"
    if (result.status is RunStatus.STOPPED_BY_MONITOR and result.stop is not None
            and result.stop.detector == "stall"):
        return f"was stopped by the monitor for a hang: {result.error}"
    return None


class Lifecycle:
    """The one owner of a run's phase, restarts, signals and ending (every transition is a method)."""

    def __init__(self, max_restarts: int, max_rollbacks: int = 0) -> None:
        self.max_restarts = max_restarts
        self.max_rollbacks = max_rollbacks
        self.phase = Phase.STARTING
        self.restarts = 0
        self.rollbacks = 0
        self.signal: int | None = None  # the first signal received
        self.forced_by: str | None = None  # the name of a second one
        self.result: RunResult | None = None  # the last attempt's judged result
        self.unrestarted: str | None = None  # why a restart was due when none was left

    def begin_attempt(self) -> None:
        if self.phase not in (Phase.STARTING, Phase.BACKING_OFF):
            raise RuntimeError(f"an attempt cannot begin while {self.phase}")
        self.phase = Phase.TRAINING

    def signalled(self, signum: int, name: str) -> SignalAction:
        """A signal arrived (the supervisor hands each one over once, in order): what the training must do."""
        if self.signal is None:
            self.signal = signum
            return SignalAction.STOP
        if self.forced_by is None:
            self.forced_by = name
            return SignalAction.FORCE
        return SignalAction.NONE

    def attempt_ended(self, result: RunResult, *, monitor_stop: RunResult | None,
                      progressed: bool) -> NextAttempt | None:
        """The attempt is over: the restart or rollback that is due (then BACKING_OFF), or None (then ENDED)."""
        if self.phase is not Phase.TRAINING:
            raise RuntimeError(f"no attempt is training ({self.phase})")
        self.result = judge(result, monitor_stop)
        rollable = (RunStatus.STOPPED_BY_MONITOR, RunStatus.COMPLETED)  # completed: the anomaly was at its last step
        anomaly = self.result.anomaly if self.result.status in rollable else None
        if anomaly is not None:
            return self._rollback(anomaly)
        cause = restart_cause(self.result, progressed=progressed)
        if cause is not None and self.signal is None and self.restarts < self.max_restarts:
            self.restarts += 1
            self.phase = Phase.BACKING_OFF
            return NextAttempt(cause)
        if cause is not None and self.signal is None:
            self.unrestarted = cause
        self.phase = Phase.ENDED
        return None

    def _rollback(self, anomaly: Anomaly) -> NextAttempt | None:
        if self.signal is None and self.rollbacks < self.max_rollbacks:
            self.rollbacks += 1
            self.phase = Phase.BACKING_OFF
            return NextAttempt(f"was stopped by the monitor for a rollback: {self.judged.error or anomaly.message}",
                               anomaly)
        if self.signal is None:
            self._not_rolled_back(f"no rollback left ({self.rollbacks} of {self.max_rollbacks} used)")
        self.phase = Phase.ENDED
        return None

    def rollback_impossible(self, why: str) -> None:
        """The rollback that was due cannot be done (no checkpoint before the anomaly): the run ends stopped."""
        if self.phase is not Phase.BACKING_OFF or self.judged.anomaly is None:
            raise RuntimeError(f"no rollback is due ({self.phase})")
        self.rollbacks -= 1
        self._not_rolled_back(why)
        self.phase = Phase.ENDED

    def data_exhausted(self, why: str) -> None:
        """The rollback that was due has no data left to train after the anomaly: the run ends completed, ``why``
        its note."""
        if self.phase is not Phase.BACKING_OFF or self.judged.anomaly is None:
            raise RuntimeError(f"no rollback is due ({self.phase})")
        self.rollbacks -= 1
        self.result = RunResult(RunStatus.COMPLETED, note=why)
        self.phase = Phase.ENDED

    def _not_rolled_back(self, why: str) -> None:
        """A stopped attempt stays stopped, with why; one that completed its last step stays completed, noted."""
        judged = self.judged
        if judged.status is RunStatus.COMPLETED and judged.anomaly is not None:
            self.result = RunResult(RunStatus.COMPLETED, note=f"{judged.anomaly.message} at the last step; not "
                                                              f"rolled back: {why}")
            return
        self.result = RunResult(RunStatus.STOPPED_BY_MONITOR, f"{judged.error}; not rolled back: {why}")

    @property
    def judged(self) -> RunResult:
        """The last attempt's judged result (after ``attempt_ended``)."""
        if self.result is None:
            raise RuntimeError("no attempt has ended")
        return self.result

    def backoff_interrupted(self) -> None:
        """A signal came during the back-off: no restart."""
        if self.phase is not Phase.BACKING_OFF:
            raise RuntimeError(f"not backing off ({self.phase})")
        self.result = RunResult(RunStatus.INTERRUPTED)
        self.phase = Phase.ENDED

    def exit_code(self, status: RunStatus) -> ExitCode:
        return exit_code(status, self.signal)

    def ending(self) -> Ending:
        """The run's final status, error and exit code (ENDED only)."""
        if self.phase is not Phase.ENDED or self.result is None:
            raise RuntimeError(f"the run has not ended ({self.phase})")
        status, error = self.result.status, self.result.error
        if self.signal is not None and status not in (RunStatus.FAILED, RunStatus.COMPLETED):
            status, error = RunStatus.INTERRUPTED, None
        if status is RunStatus.INTERRUPTED:
            error = f"forced by a second {self.forced_by}" if self.forced_by is not None else None
        killed_by = self.result.killed_by if status is RunStatus.FAILED else None
        note = self.result.note if status is RunStatus.COMPLETED else None
        return Ending(status, error, self.exit_code(status), killed_by, note)
