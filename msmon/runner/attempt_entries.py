"""Each attempt of a run as run.json lists it (``attempts``), and the run's totals over them.

An entry holds the attempt's number, start and end time, status, why it started (``reason``), the step and
checkpoint it resumed from, its last step, alerts, exit code and error (docs/architecture.md, "run.json").
"""

from __future__ import annotations

from typing import Any

from msmon.runner.runinfo import now_iso
from msmon.status import RunStatus

#: ``reason`` of an attempt: the first start, a resume asked for by the user, an automatic restart, a rollback.
START, RESUME, RESTART, ROLLBACK = "start", "resume", "restart", "rollback"
#: What an attempt entry of run.json holds when it ends.
END_FIELDS = ("status", "exit_code", "last_step", "alert_count", "dropped_records", "records_lost", "internal_errors",
              "framework_warnings", "framework_errors", "error")
#: What run.json sums over the attempts.
SUMMED = ("alert_count", "dropped_records", "records_lost", "internal_errors", "framework_warnings",
          "framework_errors")


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
    automatic restart and each rollback adds its own alert. ``info`` alone when it has one attempt."""
    attempts = info.get("attempts") or []
    if len(attempts) < 2:
        return info
    summed = {key: sum(int(entry.get(key) or 0) for entry in attempts) for key in SUMMED}
    summed["alert_count"] += sum(entry.get("reason") in (RESTART, ROLLBACK) for entry in attempts)
    return {**info, **summed}
