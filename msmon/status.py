"""A run's status and the exit code it ends with: one enum each (ExitCode in msmon.errors), one map between them;
and which attempt of a run a training process is.

``msmon run`` starts each attempt of a run (the first, a ``--resume``, an automatic restart) with the attempt in the
rank's spec (msmon.runner.protocol.RankSpec); the rank hands it to its session, which hands it to the backends (they
continue their files and runs from that step; TensorBoard purges what comes after it) and to the health detectors
(they start warm).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from enum import StrEnum

from msmon.errors import ExitCode


class RunStatus(StrEnum):
    """A run's (and an attempt's, and a rank's) status in run.json, the rank results and every backend."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    STOPPED_BY_MONITOR = "stopped_by_monitor"

    @classmethod
    def parse(cls, value: object) -> RunStatus | None:
        """The status a JSON value names, or None (an unknown or missing value)."""
        try:
            return cls(str(value)) if isinstance(value, str) else None
        except ValueError:
            return None


_EXIT_BY_STATUS = {
    RunStatus.COMPLETED: ExitCode.OK,
    RunStatus.FAILED: ExitCode.TRAINING_FAILED,
    RunStatus.STOPPED_BY_MONITOR: ExitCode.STOPPED_BY_MONITOR,
}
_EXIT_BY_SIGNAL: dict[int, ExitCode] = {
    signal.SIGINT: ExitCode.INTERRUPTED_SIGINT, signal.SIGTERM: ExitCode.INTERRUPTED_SIGTERM,
}


def exit_code(status: RunStatus, signum: int | None = None) -> ExitCode:
    """The exit code a run that ended with ``status`` ends with (``signum``: what interrupted it; SIGINT when
    unknown). A running run has none."""
    if status is RunStatus.INTERRUPTED:
        return _EXIT_BY_SIGNAL.get(signum or signal.SIGINT, ExitCode.INTERRUPTED_SIGINT)
    if status is RunStatus.RUNNING:
        raise ValueError("a running run has no exit code")
    return _EXIT_BY_STATUS[status]


def rank_exit_code(status: RunStatus) -> ExitCode:
    """A rank process's own exit code: TRAINING_FAILED when it failed, else OK (its result file says the rest:
    the parent decides the run's status and exit code from the results)."""
    return ExitCode.TRAINING_FAILED if status is RunStatus.FAILED else ExitCode.OK


@dataclass(frozen=True)
class Attempt:
    """Attempt ``number`` (1 = the first) of a run; ``resumed_from_step`` None when it trains from the start;
    ``rolled_back``: it follows a rollback (a backend that cannot drop the values logged after the resume step
    starts a history of its own, so it shows the curve that survived)."""

    number: int
    resumed_from_step: int | None = None
    rolled_back: bool = False
