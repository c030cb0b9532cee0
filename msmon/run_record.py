"""run.json: what ran, where, with what, how it ended, and each attempt; the one owner of its format.

``RunRecord`` (the run) and ``AttemptEntry`` (one launch of its training: the first, each resume, each automatic
restart, each rollback) are frozen: the ``msmon run`` parent makes a new value for every change and writes it with
``write_run_record`` (atomically). Every reader (``msmon runs`` / ``status``, ``msmon resume``, the next ``msmon run
--resume`` of the directory) reads it with ``read_run_record``; a value of the wrong type reads as missing, so a
run.json of another msmon, a hand-edited or a half-written one never raises past ``OSError`` / ``ValueError``.
The keys are listed in docs/architecture.md ("run.json").
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path

from msmon import layout
from msmon.anomaly import Rollback, rollbacks_of
from msmon.status import RunStatus
from msmon.util.atomic import atomic_write_json
from msmon.util.jsonfiles import JsonObject, JsonValue, read_json_object

logger = logging.getLogger("msmon")

#: The counts run.json sums over the attempts of a run.
SUMMED = ("alert_count", "dropped_records", "records_lost", "internal_errors", "framework_warnings",
          "framework_errors")


def now_iso() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def parse_time(value: str | None) -> datetime | None:
    """An ISO 8601 time of run.json (``Z`` or an offset; a naive one is local), or None."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.astimezone()


class AttemptReason(StrEnum):
    """Why an attempt started: the first start, a resume asked for by the user, an automatic restart, a rollback."""

    START = "start"
    RESUME = "resume"
    RESTART = "restart"
    ROLLBACK = "rollback"


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class AttemptEntry:
    """One attempt as run.json lists it (``attempts``); the fields after ``checkpoint`` are set when it ends."""

    attempt: int
    start_time: str | None
    reason: AttemptReason | None
    resumed_from_step: int | None = None
    checkpoint: str | None = None
    status: RunStatus = RunStatus.RUNNING
    end_time: str | None = None
    last_step: int | None = None
    exit_code: int | None = None
    alert_count: int | None = None
    dropped_records: int | None = None
    records_lost: int | None = None
    internal_errors: int | None = None
    framework_warnings: int | None = None
    framework_errors: int | None = None
    error: str | None = None

    def to_json(self) -> JsonObject:
        begun = {"attempt": self.attempt, "start_time": self.start_time, "end_time": self.end_time,
                 "status": self.status.value, "reason": self.reason.value if self.reason else None,
                 "resumed_from_step": self.resumed_from_step, "checkpoint": self.checkpoint}
        if self.status is RunStatus.RUNNING:
            return begun
        return {**begun, "last_step": self.last_step, "exit_code": self.exit_code,
                **{key: getattr(self, key) for key in SUMMED}, "error": self.error}

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue], number: int) -> AttemptEntry:
        """An entry as run.json holds it (``number``: its place in the list, when it names none)."""
        reason = _str(data.get("reason"))
        return cls(
            attempt=_int(data.get("attempt")) or number, start_time=_str(data.get("start_time")),
            reason=AttemptReason(reason) if reason in tuple(AttemptReason) else None,
            resumed_from_step=_int(data.get("resumed_from_step")), checkpoint=_str(data.get("checkpoint")),
            status=RunStatus.parse(data.get("status")) or RunStatus.RUNNING, end_time=_str(data.get("end_time")),
            last_step=_int(data.get("last_step")), exit_code=_int(data.get("exit_code")),
            **{key: _int(data.get(key)) for key in SUMMED}, error=_str(data.get("error")),
        )

    def ended(self, *, status: RunStatus, exit_code: int, last_step: int | None, error: str | None,
              counts: Mapping[str, int]) -> AttemptEntry:
        """This attempt closed now (``counts``: its ``SUMMED`` values over its ranks)."""
        summed: JsonObject = {key: int(counts.get(key) or 0) for key in SUMMED}
        return dataclasses.replace(self, status=status, exit_code=exit_code, last_step=last_step, error=error,
                                   end_time=now_iso(), **summed)


@dataclass(frozen=True)
class RunRecord:
    """run.json. ``framework_warnings`` / ``framework_errors`` are written once the run ended, ``note`` (why a
    completed run ended before its last step) and ``rollbacks`` when there are any."""

    msmon_version: str | None = None
    mindspore_version: str | None = None
    mindformers_version: str | None = None
    python_version: str | None = None
    device_target: str | None = None
    device_count: int | None = None
    host: str | None = None
    pid: int | None = None
    command: tuple[str, ...] = ()
    cwd: str | None = None
    git_commit: str | None = None
    config_path: str | None = None
    project_name: str | None = None
    run_name: str | None = None
    run_dir: str | None = None
    total_steps: int | None = None
    start_time: str | None = None
    end_time: str | None = None
    status: RunStatus | None = None
    last_step: int | None = None
    exit_code: int | None = None
    dropped_records: int | None = 0
    records_lost: int | None = 0
    backends_failed_to_close: tuple[str, ...] = ()
    backends: JsonObject = field(default_factory=dict)  # per backend: its accounting (RankResult's)
    alert_count: int | None = 0
    internal_errors: int | None = 0
    first_internal_error: str | None = None
    error: str | None = None
    launch: str | None = None  # msmon | command (msmon run CONFIG -- COMMAND)
    request: JsonObject | None = None  # what msmon resume replays (runner.plan.ResumeRecord reads it)
    layout: JsonObject | None = None  # the config keys that must not change between attempts, the world size
    attempts: tuple[AttemptEntry, ...] = ()
    rollbacks: tuple[Rollback, ...] = ()
    framework_warnings: int | None = None
    framework_errors: int | None = None
    note: str | None = None

    @property
    def started_at(self) -> datetime | None:
        return parse_time(self.start_time)

    @property
    def ended_at(self) -> datetime | None:
        return parse_time(self.end_time)

    def to_json(self) -> JsonObject:
        data: JsonObject = {}
        for name in (item.name for item in dataclasses.fields(self)):
            value = getattr(self, name)
            if name in WRITTEN_WHEN_SET and (value is None or value == ()):
                continue
            if name in ("attempts", "rollbacks"):
                value = [entry.to_json() for entry in value]
            elif isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, RunStatus):
                value = value.value
            data[name] = value
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> RunRecord:
        """run.json as read (never raises: what is missing or of the wrong type reads as missing)."""
        listed = data.get("attempts")
        scalars: JsonObject = {**{name: _str(data.get(name)) for name in STRING_FIELDS},
                               **{name: _int(data.get(name)) for name in NUMBER_FIELDS}}
        return cls(
            **scalars,
            status=RunStatus.parse(data.get("status")), command=_strings(data.get("command")),
            backends_failed_to_close=_strings(data.get("backends_failed_to_close")),
            backends=_object(data.get("backends")) or {}, request=_object(data.get("request")),
            layout=_object(data.get("layout")),
            attempts=tuple(AttemptEntry.from_json(entry, number) for number, entry in
                           enumerate(listed if isinstance(listed, list) else [], start=1) if isinstance(entry, dict)),
            rollbacks=tuple(rollbacks_of(data)),
        )

    def totals(self) -> RunRecord:
        """This record with ``SUMMED`` summed over its attempts (an attempt's alerts include the restart or rollback
        alert that announced its end, also one a signal then cancelled)."""
        if not self.attempts:
            return self
        summed: JsonObject = {key: sum(getattr(entry, key) or 0 for entry in self.attempts) for key in SUMMED}
        return dataclasses.replace(self, **summed)


#: The fields of a RunRecord read as strings and as integers (the rest are read one by one).
STRING_FIELDS = ("msmon_version", "mindspore_version", "mindformers_version", "python_version", "device_target",
                 "host", "cwd", "git_commit", "config_path", "project_name", "run_name", "run_dir", "start_time",
                 "end_time", "first_internal_error", "error", "launch", "note")
NUMBER_FIELDS = ("device_count", "pid", "total_steps", "last_step", "exit_code", "dropped_records", "records_lost",
                 "alert_count", "internal_errors", "framework_warnings", "framework_errors")
#: Keys run.json has only when they are set (the framework's counts once the run ended).
WRITTEN_WHEN_SET = ("rollbacks", "framework_warnings", "framework_errors", "note")


def _strings(value: object) -> tuple[str, ...]:
    return tuple(str(part) for part in value) if isinstance(value, list) else ()


def _object(value: object) -> JsonObject | None:
    return dict(value) if isinstance(value, dict) else None


def read_run_record(run_dir: Path, name: str = layout.RUN_JSON) -> RunRecord:
    """The run's run.json; OSError when it cannot be read (FileNotFoundError when missing), ValueError when it is
    not one JSON object."""
    return RunRecord.from_json(read_json_object(run_dir / name))


def recorded(run_dir: Path) -> RunRecord | None:
    """The run's run.json, or None when it has none (or it is unreadable)."""
    try:
        return read_run_record(run_dir)
    except (OSError, ValueError):
        return None


def write_run_record(run_dir: Path, record: RunRecord, name: str = layout.RUN_JSON) -> None:
    """Write run.json atomically (its directory recreated if it was removed during the run)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(run_dir / name, record.to_json())
