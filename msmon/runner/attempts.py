"""The attempts of one run, and one continuous curve across them.

Every launch of the training for a run directory is an attempt: the first, each ``msmon run --resume`` /
``msmon resume``, each automatic restart. run.json lists them (``attempts``: number, start and end time, status,
the step and checkpoint it resumed from, why it started, its last step, alerts, exit code, error). Before an
attempt resumes from step S, the records an earlier attempt wrote after S (metrics.jsonl, metrics.csv,
alerts.jsonl, in the run directory and in per-rank ``rank_N/`` directories) move to ``<name>.attempt-N.<ext>``
(N: the attempt before this one): every reader of metrics.jsonl then sees each step once.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from msmon import layout
from msmon.runner.runinfo import now_iso
from msmon.status import RunStatus
from msmon.util.atomic import atomic_write_text
from msmon.util.files import subdirs

#: The files whose records are kept per step.
STEPPED_FILES = (layout.METRICS, layout.METRICS_CSV, layout.ALERTS)
#: ``reason`` of an attempt: the first start, a resume asked for by the user, an automatic restart.
START, RESUME, RESTART = "start", "resume", "restart"
#: What an attempt entry of run.json holds when it ends.
END_FIELDS = ("status", "exit_code", "last_step", "alert_count", "dropped_records", "records_lost", "internal_errors",
              "error")
#: What run.json sums over the attempts.
SUMMED = ("alert_count", "dropped_records", "records_lost", "internal_errors")


def _json_step(line: str) -> int | None:
    try:
        step = json.loads(line).get("step")
    except (ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _split_lines(lines: list[str], after_step: int, step_of: Any) -> tuple[list[str], list[str]]:
    """(kept, superseded): a line whose step is above ``after_step``, and a cut last line, are superseded."""
    kept: list[str] = []
    moved: list[str] = []
    for index, line in enumerate(lines):
        torn = index == len(lines) - 1 and not line.endswith("\n")
        step = step_of(line)
        (moved if torn or (step is not None and step > after_step) else kept).append(line)
    return kept, moved


def _csv_step_reader(header: str) -> Any:
    columns = next(csv.reader(io.StringIO(header)), [])
    index = columns.index("step") if "step" in columns else 0

    def step_of(line: str) -> int | None:
        row = next(csv.reader(io.StringIO(line)), [])
        try:
            return int(row[index])
        except (IndexError, ValueError):
            return None

    return step_of


def _supersede_file(path: Path, after_step: int, attempt: int) -> int:
    """Move ``path``'s records after ``after_step`` to its attempt file; the number moved."""
    if not path.is_file():
        return 0
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    header = lines[:1] if path.name.endswith(".csv") else []
    body = lines[len(header):]
    step_of = _csv_step_reader(header[0]) if header else _json_step
    kept, moved = _split_lines(body, after_step, step_of)
    if not moved:
        return 0
    aside = path.with_name(layout.superseded(path.name, attempt))
    fresh = not aside.exists()
    with aside.open("a", encoding="utf-8") as handle:
        handle.writelines((header if fresh else []) + [m if m.endswith("\n") else m + "\n" for m in moved])
    atomic_write_text(path, "".join(header + kept))
    return len(moved)


def supersede(run_dir: Path, after_step: int, attempt: int) -> int:
    """Move every record attempts up to ``attempt`` wrote after ``after_step`` aside; how many were moved."""
    directories = [run_dir, *(d for d in subdirs(run_dir) if d.name.startswith("rank_"))]
    return sum(_supersede_file(directory / name, after_step, attempt)
               for directory in directories for name in STEPPED_FILES)


def carried_over(previous: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The attempts of an earlier run.json of this run directory (one made up from it when it predates attempts)."""
    if not previous:
        return []
    found = previous.get("attempts")
    if isinstance(found, list) and found:
        entries = [dict(entry) for entry in found if isinstance(entry, dict)]
    else:
        entries = [{"attempt": 1, "start_time": previous.get("start_time"), "resumed_from_step": None,
                    "reason": START, **{key: previous.get(key) for key in END_FIELDS}}]
    for entry in entries:  # an msmon that was killed itself left its last attempt running
        if RunStatus.parse(entry.get("status")) in (None, RunStatus.RUNNING):
            entry.update(status=RunStatus.FAILED.value,
                         error=entry.get("error") or "msmon itself ended during this attempt",
                         end_time=entry.get("end_time") or previous.get("end_time"))
    return entries


def begin(info: dict[str, Any], *, resumed_from: dict[str, Any] | None, reason: str) -> dict[str, Any]:
    """Append a running attempt to ``info["attempts"]`` and return it (``resumed_from``: the checkpoint's
    ``ResumePoint.to_json()``, None when training from the start)."""
    attempts = info.setdefault("attempts", [])
    entry: dict[str, Any] = {
        "attempt": len(attempts) + 1, "start_time": now_iso(), "end_time": None, "status": RunStatus.RUNNING.value,
        "reason": reason, "resumed_from_step": resumed_from["step"] if resumed_from else None,
        "checkpoint": resumed_from["path"] if resumed_from else None,
    }
    attempts.append(entry)
    return entry


def end(entry: dict[str, Any], **fields: Any) -> None:
    """Close an attempt entry with its end time and ``END_FIELDS`` (keyword arguments)."""
    entry.update({key: value for key, value in fields.items() if key in END_FIELDS}, end_time=now_iso())


def finish(info: dict[str, Any]) -> dict[str, Any]:
    """run.json at the end of ``msmon run``: the last attempt closed with the run's end (its last step from the
    attempt when the ranks left no result), then the totals over the attempts."""
    entries = info.get("attempts") or []
    if entries and entries[-1].get("status") == RunStatus.RUNNING:
        last = entries[-1]
        step = info.get("last_step") if info.get("last_step") is not None else last.get("last_step")
        end(last, **{**{key: info.get(key) for key in END_FIELDS}, "last_step": step})
        info = {**info, "last_step": step}
    return totals(info)


def totals(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` with ``alert_count``, ``dropped_records`` and ``records_lost`` summed over its attempts; each
    automatic restart adds its own alert. ``info`` alone when it has one attempt."""
    attempts = info.get("attempts") or []
    if len(attempts) < 2:
        return info
    summed = {key: sum(int(entry.get(key) or 0) for entry in attempts) for key in SUMMED}
    summed["alert_count"] += sum(entry.get("reason") == RESTART for entry in attempts)
    return {**info, **summed}
