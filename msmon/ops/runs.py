"""The run table: find run directories under a save_dir and summarise each, tolerating half-written files."""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

from msmon.errors import MsmonError

MARKERS = ("run.json", "heartbeat.json", "metrics.jsonl")
STALE_AFTER_S = 600.0
_TAIL_LIMIT = 4 * 1024 * 1024


@dataclass
class RunInfo:
    """One run as found on disk; ``problems`` lists files that were missing or unreadable."""

    path: Path
    project: str
    run: str
    status: str
    start: datetime | None = None
    end: datetime | None = None
    duration_s: float | None = None
    last_step: int | None = None
    last_loss: float | None = None
    alert_count: int | None = None
    heartbeat_age_s: float | None = None
    stale: bool = False
    last_modified: float = 0.0
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        loss = self.last_loss
        return {
            "project": self.project, "run": self.run, "status": self.status, "path": str(self.path),
            "start": self.start.isoformat() if self.start else None,
            "end": self.end.isoformat() if self.end else None,
            "duration_s": self.duration_s, "last_step": self.last_step,
            "last_loss": loss if loss is None or math.isfinite(loss) else str(loss),
            "alert_count": self.alert_count, "heartbeat_age_s": self.heartbeat_age_s, "stale": self.stale,
            "problems": self.problems,
        }


def _is_run_dir(path: Path) -> bool:
    return any((path / name).is_file() for name in MARKERS)


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(Path(e.path) for e in os.scandir(path) if e.is_dir(follow_symlinks=False))
    except OSError:
        return []


def find_run_dirs(save_dir: Path) -> list[Path]:
    """Run directories at ``save_dir``, ``save_dir/<run>`` or ``save_dir/<project>/<run>`` (symlinks skipped)."""
    if _is_run_dir(save_dir):
        return [save_dir]
    found = []
    for child in _subdirs(save_dir):
        if _is_run_dir(child):
            found.append(child)
        else:
            found.extend(d for d in _subdirs(child) if _is_run_dir(d))
    return found


def read_json(path: Path, problems: list[str]) -> dict[str, Any] | None:
    """A JSON object from ``path``; None (and a note in ``problems``) when missing or half-written."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        problems.append(f"{path.name} unreadable")
        return None
    if not isinstance(data, dict):
        problems.append(f"{path.name} is not an object")
        return None
    return data


def last_records(path: Path, keys: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """For each key, the last parsable JSONL line of ``path`` that has it (reads backwards, at most 4 MiB)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            handle.seek(max(0, size - _TAIL_LIMIT))
            data = handle.read()
    except OSError:
        return {}
    found: dict[str, dict[str, Any]] = {}
    for line in reversed(data.splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            for key in keys:
                if key in record and key not in found:
                    found[key] = record
        if len(found) == len(keys):
            break
    return found


def _count_lines(path: Path) -> int | None:
    try:
        with open(path, "rb") as handle:
            return sum(1 for line in handle if line.strip())
    except OSError:
        return None


def _time(value: Any) -> datetime | None:
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.astimezone()
    if isinstance(value, int | float) and math.isfinite(value):
        return datetime.fromtimestamp(value).astimezone()
    return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def last_modified(path: Path) -> float:
    """The newest mtime of the directory and the files in it (symlinks not followed)."""
    newest = 0.0
    for root, _dirs, files in os.walk(path, followlinks=False):
        for name in [".", *files]:
            try:
                newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
            except OSError:
                continue
    return newest


def _this_host(host: Any) -> bool:
    return isinstance(host, str) and host in (socket.gethostname(), platform.node())


def _pid_alive(pid: Any, start: datetime | None) -> bool:
    """Whether ``pid`` runs and was not started after the run (a reused pid is not the run)."""
    if not isinstance(pid, int):
        return False
    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        return False
    return start is None or created <= start.timestamp() + 5


def is_stale(heartbeat: dict | None, run: dict | None, start: datetime | None, age_s: float | None,
             stale_after_s: float) -> bool:
    """A running run is stale when its pid is gone on this host, else when its heartbeat is too old."""
    source = heartbeat or run or {}
    host, pid = source.get("host", (run or {}).get("host")), source.get("pid", (run or {}).get("pid"))
    if _this_host(host) and isinstance(pid, int):
        return not _pid_alive(pid, start)
    return age_s is None or age_s > stale_after_s


def read_run(path: Path, save_dir: Path, stale_after_s: float = STALE_AFTER_S, now: float | None = None) -> RunInfo:
    """Summarise one run directory; never raises on a bad or missing file."""
    now = time.time() if now is None else now
    problems: list[str] = []
    run = read_json(path / "run.json", problems)
    heartbeat = read_json(path / "heartbeat.json", problems)
    rel = path.relative_to(save_dir).parts if path != save_dir else (path.parent.name, path.name)
    project = str((run or {}).get("project_name") or (rel[0] if len(rel) > 1 else "-"))
    info = RunInfo(path=path, project=project, run=str((run or {}).get("run_name") or path.name), status="unknown")
    info.problems = problems
    if run is None and "run.json unreadable" not in problems:
        problems.append("no run.json")
    info.last_modified = last_modified(path)
    info.start, info.end = _time((run or {}).get("start_time")), _time((run or {}).get("end_time"))
    beat = _number((heartbeat or {}).get("time"))
    info.heartbeat_age_s = now - beat if beat is not None else None
    metric = last_records(path / "metrics.jsonl", ("loss", "step"))
    info.last_loss = _number(metric.get("loss", {}).get("loss"))
    steps = [(run or {}).get("last_step"), (heartbeat or {}).get("step"), metric.get("step", {}).get("step")]
    known = [int(s) for s in steps if isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s)]
    info.last_step = max(known) if known else None
    alerts = _count_lines(path / "alerts.jsonl")
    info.alert_count = alerts if alerts is not None else (run or {}).get("alert_count")
    recorded = (run or {}).get("status")
    if recorded == "running" or (recorded is None and heartbeat is not None):
        age = info.heartbeat_age_s
        if age is None:
            age = now - (info.start.timestamp() if info.start else info.last_modified)
        info.stale = is_stale(heartbeat, run, info.start, age, stale_after_s)
        info.status = "stale" if info.stale else "running"
    elif isinstance(recorded, str):
        info.status = recorded
    if info.start is not None:
        end = info.end.timestamp() if info.end else (now if info.status == "running" else beat or info.last_modified)
        info.duration_s = max(0.0, end - info.start.timestamp())
    return info


def list_runs(save_dir: str | os.PathLike[str], stale_after_s: float = STALE_AFTER_S) -> list[RunInfo]:
    """Every run under ``save_dir``, oldest start first; MsmonError when the directory does not exist."""
    root = Path(save_dir)
    if not root.is_dir():
        raise MsmonError(f"{root}: no such directory", "pass the save_dir of the runs (monitor_config.save_dir)")
    runs = [read_run(p, root, stale_after_s) for p in find_run_dirs(root)]
    return sorted(runs, key=lambda r: (r.start.timestamp() if r.start else r.last_modified, r.project, r.run))
