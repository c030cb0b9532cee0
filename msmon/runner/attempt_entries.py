"""Each attempt of a run as run.json lists it (``attempts``): the ones an earlier run.json of the directory lists,
the one that begins, the one the run's end closes (docs/architecture.md, "run.json")."""

from __future__ import annotations

import dataclasses

from msmon.run_record import SUMMED, AttemptEntry, AttemptReason, RunRecord, now_iso
from msmon.runner.resume import ResumePoint
from msmon.status import RunStatus


def carried_over(previous: RunRecord | None) -> tuple[AttemptEntry, ...]:
    """The attempts of an earlier run.json of this run directory (one made up from it when it predates attempts);
    an attempt it shows running was cut short by the end of that msmon itself (a failure)."""
    if previous is None:
        return ()
    entries = previous.attempts or (AttemptEntry(
        1, previous.start_time, AttemptReason.START, status=previous.status or RunStatus.RUNNING,
        end_time=previous.end_time, last_step=previous.last_step, exit_code=previous.exit_code, error=previous.error,
        **{key: getattr(previous, key) for key in SUMMED}),)
    return tuple(dataclasses.replace(entry, status=RunStatus.FAILED,
                                     error=entry.error or "msmon itself ended during this attempt",
                                     end_time=entry.end_time or previous.end_time)
                 if entry.status is RunStatus.RUNNING else entry for entry in entries)


def begin(record: RunRecord, point: ResumePoint | None, reason: AttemptReason) -> RunRecord:
    """``record`` with a running attempt appended (``point``: the checkpoint it resumes from, None from the start)."""
    entry = AttemptEntry(len(record.attempts) + 1, now_iso(), reason,
                         resumed_from_step=point.step if point else None,
                         checkpoint=str(point.path) if point else None)
    return dataclasses.replace(record, attempts=(*record.attempts, entry))


def replace_last(record: RunRecord, entry: AttemptEntry) -> RunRecord:
    """``record`` with its last attempt replaced by ``entry``."""
    return dataclasses.replace(record, attempts=(*record.attempts[:-1], entry))
