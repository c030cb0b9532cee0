"""Each rank's end status (``logs/rank_N.result.json``) and the run's status decided from them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msmon import layout
from msmon.util.atomic import atomic_write_json
from msmon.util.jsonfiles import read_json_object


@dataclass
class RunResult:
    status: str
    error: str | None = None


def write_result(run_dir: Path, rank: int, result: dict[str, Any]) -> None:
    """Leave one rank's end status for the parent ``msmon run`` (its directory recreated if it was removed)."""
    path = layout.rank_result(run_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, {"rank": rank, **result})


def read_results(run_dir: Path) -> dict[int, dict[str, Any]]:
    """rank -> its result, for every readable result file."""
    results = {}
    for path in (run_dir / layout.LOGS).glob(layout.RESULT_GLOB):
        try:
            data = read_json_object(path)
            results[int(data["rank"])] = data
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return results


def clear_results(run_dir: Path) -> None:
    """Remove the results left by an earlier attempt in this run directory."""
    for old in (run_dir / layout.LOGS).glob(layout.RESULT_GLOB):
        old.unlink(missing_ok=True)


def decide(
    results: dict[int, dict[str, Any]], *, returncode: int | None, ranks_here: list[int], distributed: bool,
    stop_requested: bool, where: Path,
) -> RunResult:
    """The run's status: a failed rank wins, then a monitor stop, then an interruption; a missing result of a rank
    of this machine (``ranks_here``), or a single training process that ended badly, is a failure naming ``where``
    to look. With ranks, their results decide, not msrun's exit code: on a machine that also starts a scheduler
    msrun can exit 1 after every rank completed (two nodes on one host: the second scheduler cannot bind)."""
    failed = [r for r in results.values() if r.get("status") == "failed"]
    if failed:
        first = min(failed, key=lambda r: r["rank"])
        prefix = f"rank {first['rank']}: " if distributed else ""
        return RunResult("failed", f"{prefix}{first.get('error')}")
    stopped = [r for r in results.values() if r.get("status") == "stopped_by_monitor"]
    if stopped:
        return RunResult("stopped_by_monitor", stopped[0].get("error"))
    if stop_requested or any(r.get("status") == "interrupted" for r in results.values()):
        return RunResult("interrupted")
    missing = [rank for rank in ranks_here if rank not in results]
    if missing or (returncode != 0 and not distributed):
        of = f" of rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}" if distributed else ""
        return RunResult("failed", f"the training process exited with code {returncode} without a result{of} "
                                   f"(see {where})")
    return RunResult("completed")


def backend_accounting(results: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """What the backends kept and lost, over the ranks: ``records_lost`` (summed), ``backends_failed_to_close``
    (every rank's), ``backends`` (the lowest writing rank's per-backend counts)."""
    writing = [results[rank] for rank in sorted(results) if results[rank].get("backends")]
    return {
        "records_lost": sum(int(r.get("records_lost") or 0) for r in results.values()),
        "backends_failed_to_close": sorted({name for r in results.values()
                                            for name in r.get("backends_failed_to_close") or []}),
        "backends": writing[0]["backends"] if writing else {},
    }


def totals(results: dict[int, dict[str, Any]]) -> tuple[int | None, int, int]:
    """(last step, dropped records, alert count) over the ranks' results."""
    steps = [r["last_step"] for r in results.values() if r.get("last_step") is not None]
    return (
        max(steps) if steps else None,
        sum(int(r.get("dropped_records") or 0) for r in results.values()),
        sum(int(r.get("alert_count") or 0) for r in results.values()),
    )
