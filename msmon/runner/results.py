"""The status of one attempt decided from its ranks' results (msmon.runner.protocol), and their totals."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from msmon.anomaly import Anomaly, StopRequest
from msmon.runner.protocol import BackendAccounting, RankResult, read_results
from msmon.status import RunStatus
from msmon.util.internal_errors import InternalErrors


@dataclass(frozen=True)
class RunResult:
    """How an attempt (and at last the run) ended."""

    status: RunStatus
    error: str | None = None
    killed_by: int | None = None  # the signal that ended the training process when it left no result (SIGKILL: OOM)
    stop: StopRequest | None = None  # what a detector's action stopped it for (or asked at the last step)
    note: str | None = None  # completed, but not at its last planned step: why (its data exhausted)

    @property
    def anomaly(self) -> Anomaly | None:
        """What a rollback detector stopped the attempt for (or found at its last step)."""
        return self.stop.anomaly if self.stop is not None else None


def decide(
    results: dict[int, RankResult], *, returncode: int | None, ranks_here: list[int], distributed: bool,
    stop_requested: bool, where: Path, untrained: str | None = None,
) -> RunResult:
    """The run's status: a failed rank wins, then a monitor stop, then an interruption; a user's launch
    (``untrained``: its program) none of whose processes trained a Trainer, a missing result of a rank of this
    machine (``ranks_here``), or a single training process that ended badly, is a failure naming what happened
    (``where``: the log to look at). With ranks, their results decide, not msrun's exit code: on a machine that
    also starts a scheduler msrun can exit 1 after every rank completed (two nodes on one host: the second
    scheduler cannot bind)."""
    failed = [r for r in results.values() if r.status is RunStatus.FAILED]
    if failed:
        first = min(failed, key=lambda r: r.rank)
        prefix = f"rank {first.rank}: " if distributed else ""
        return RunResult(RunStatus.FAILED, f"{prefix}{first.error}")
    stopped = [r for r in results.values() if r.status is RunStatus.STOPPED_BY_MONITOR]
    if stopped:
        return RunResult(RunStatus.STOPPED_BY_MONITOR, stopped[0].error, stop=stopped[0].stop)
    if stop_requested or any(r.status is RunStatus.INTERRUPTED for r in results.values()):
        return RunResult(RunStatus.INTERRUPTED)
    if untrained is not None and not results:
        return RunResult(RunStatus.FAILED, f"{untrained} exited with code {returncode} and no process it started "
                                           "trained a mindformers Trainer (msmon monitors the processes that do)")
    missing = [rank for rank in ranks_here if rank not in results]
    if missing or (returncode != 0 and not distributed):
        of = f" of rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}" if distributed else ""
        killed_by = -returncode if returncode is not None and returncode < 0 else None
        return RunResult(RunStatus.FAILED, f"the training process exited with code {returncode} without a "
                                           f"result{of} (see {where})", killed_by)
    pending = next((r.stop for r in results.values() if r.stop is not None and r.stop.anomaly is not None), None)
    return RunResult(RunStatus.COMPLETED, stop=pending)  # a rollback detector's stop at the very last step


@dataclass(frozen=True)
class Totals:
    """An attempt's sums over its ranks."""

    last_step: int | None = None
    dropped_records: int = 0
    alert_count: int = 0
    internal_errors: InternalErrors = InternalErrors()
    framework_warnings: int = 0
    framework_errors: int = 0


def totals(results: dict[int, RankResult]) -> Totals:
    """The last step, dropped records, alerts, internal errors and the framework's warnings and errors over the
    ranks' results."""
    steps = [r.last_step for r in results.values() if r.last_step is not None]
    errors = InternalErrors()
    for rank in sorted(results):
        errors += results[rank].internal_errors
    return Totals(
        max(steps) if steps else None,
        sum(r.dropped_records for r in results.values()),
        sum(r.alert_count for r in results.values()),
        errors,
        sum(r.framework_warnings for r in results.values()),
        sum(r.framework_errors for r in results.values()),
    )


@dataclass(frozen=True)
class RankResults:
    """The results one attempt's ranks left (``logs/rank_N.result.json``), read once when its training process
    ended and handed on as this value (the attempt's status, its run.json entry, the run's end)."""

    by_rank: dict[int, RankResult] = field(default_factory=dict)

    @classmethod
    def read(cls, run_dir: Path) -> RankResults:
        return cls(read_results(run_dir))

    @property
    def totals(self) -> Totals:
        return totals(self.by_rank)

    @property
    def accounting(self) -> BackendAccounting:
        """What the backends kept and lost over the ranks: records lost (summed), the backends that failed to close
        (every rank's), the per-backend counts of the lowest rank that wrote."""
        ranks = self.by_rank
        writing = [ranks[rank].accounting for rank in sorted(ranks) if ranks[rank].accounting.backends]
        return BackendAccounting(
            writing[0].backends if writing else {}, sum(r.accounting.records_lost or 0 for r in ranks.values()),
            tuple(sorted({name for r in ranks.values() for name in r.accounting.failed_to_close})))
