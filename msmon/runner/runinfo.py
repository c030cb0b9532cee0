"""The run.json of this ``msmon run``: its start (versions, host, command, cwd, git commit) and its end (the totals
over the ranks' results); the format is ``msmon.run_record``'s."""

from __future__ import annotations

import dataclasses
import platform
import socket
from pathlib import Path

from msmon.compat import package_version
from msmon.run_record import SUMMED, RunRecord, now_iso
from msmon.runner.attempt_entries import replace_last
from msmon.runner.results import RankResults
from msmon.runner.rundir import mask_url_passwords
from msmon.status import RunStatus
from msmon.util.git import git_commit
from msmon.util.internal_errors import InternalErrors


def started(
    *,
    config_path: str | None,
    project_name: str,
    run_name: str,
    run_dir: Path,
    command: list[str],
    device_target: str,
    device_count: int,
    total_steps: int | None,
    cwd: Path,
    pid: int,
) -> RunRecord:
    """The run.json of a run that has just started (status ``running``)."""
    return RunRecord(
        msmon_version=package_version("msmon"), mindspore_version=package_version("mindspore"),
        mindformers_version=package_version("mindformers"), python_version=platform.python_version(),
        device_target=device_target, device_count=device_count, host=socket.gethostname(), pid=pid,
        command=tuple(mask_url_passwords(arg) for arg in command), cwd=str(cwd), git_commit=git_commit(cwd),
        config_path=config_path, project_name=project_name, run_name=run_name, run_dir=str(run_dir),
        total_steps=total_steps, start_time=now_iso(), status=RunStatus.RUNNING,
    )


def finished(record: RunRecord, ranks: RankResults, *, status: RunStatus, exit_code: int, watcher_alerts: int,
             error: str | None, internal: InternalErrors, attempt_last_step: int | None,
             note: str | None = None) -> RunRecord:
    """``record`` at the end of the run: the end filled in from the last attempt's ranks (``watcher_alerts``: the
    parent's rank watcher's alerts; ``internal``: the parent's own internal errors; ``note``: why a completed run
    ended before its last step), its last attempt closed with it (its last step the attempt's,
    ``attempt_last_step``, when the ranks left none), then the totals over the attempts."""
    summed = ranks.totals
    errors = internal + summed.internal_errors
    accounting = ranks.accounting
    last_step = summed.last_step if summed.last_step is not None else attempt_last_step
    ended = dataclasses.replace(
        record, status=status, exit_code=exit_code, last_step=last_step, end_time=now_iso(),
        dropped_records=summed.dropped_records, alert_count=summed.alert_count + watcher_alerts, error=error,
        internal_errors=errors.count, first_internal_error=errors.first,
        framework_warnings=summed.framework_warnings, framework_errors=summed.framework_errors,
        records_lost=accounting.records_lost, backends_failed_to_close=accounting.failed_to_close,
        backends=accounting.backends, note=note,
    )
    if ended.attempts and ended.attempts[-1].status is RunStatus.RUNNING:
        closed = ended.attempts[-1].ended(status=status, exit_code=exit_code, last_step=last_step, error=error,
                                          counts={key: getattr(ended, key) or 0 for key in SUMMED})
        ended = replace_last(ended, closed)
    return ended.totals()
