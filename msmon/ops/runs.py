"""The run table: find run directories under a save_dir and summarise each, tolerating half-written files."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from msmon import layout
from msmon.errors import MsmonError
from msmon.ops.rank_summary import summarize
from msmon.ops.ranks import RECORD_TAIL_BYTES, RankReport, first_heartbeat, report
from msmon.probe import window_dirs
from msmon.run_record import RunRecord, read_run_record
from msmon.status import RunStatus
from msmon.util import procs
from msmon.util.files import subdirs
from msmon.util.jsonfiles import TAIL_BYTES, JsonObject, tail_rows
from msmon.util.numbers import as_number

STALE_AFTER_S = 600.0


@dataclass(frozen=True)
class RunInfo:
    """One run as found on disk; ``problems`` lists files that were missing or unreadable."""

    path: Path
    project: str
    run: str
    problems: list[str]
    status: str  # run.json's; running, or stale when its process is gone or silent; unknown without one
    stale: bool
    start: datetime | None
    end: datetime | None
    duration_s: float | None
    last_modified: float  # the newest mtime of its files; its end time when run.json records its start and end
    heartbeat_age_s: float | None
    last_step: int | None
    last_loss: float | None
    alert_count: int | None
    rollbacks: int  # run.json's rollbacks (health.rollback)
    ranks: list[JsonObject]  # per rank: last step, age, state (heartbeats/)
    ranks_summary: str
    profiles: list[str]  # every rank's profile, profiles/<from>-<to>/rank_N (docs/probe.md)
    distributions: list[str]  # every rank's histograms, distributions/<from>-<to>/rank_N (docs/probe.md)

    @property
    def profile_windows(self) -> list[str]:
        """The profiled windows (``<from>-<to>``), in step order."""
        return _windows(self.profiles)

    @property
    def distribution_windows(self) -> list[str]:
        """The windows of histograms (``<from>-<to>``), in step order."""
        return _windows(self.distributions)

    def to_json(self) -> JsonObject:
        loss = self.last_loss
        return {
            "project": self.project, "run": self.run, "status": self.status, "path": str(self.path),
            "start": self.start.isoformat() if self.start else None,
            "end": self.end.isoformat() if self.end else None,
            "duration_s": self.duration_s, "last_step": self.last_step,
            "last_loss": loss if loss is None or math.isfinite(loss) else str(loss),
            "alert_count": self.alert_count, "rollbacks": self.rollbacks, "heartbeat_age_s": self.heartbeat_age_s,
            "stale": self.stale,
            "ranks": self.ranks, "profiles": self.profiles, "distributions": self.distributions,
            "problems": self.problems,
        }


def _windows(rank_dirs: list[str]) -> list[str]:
    """The windows (``<from>-<to>``) of ``<kind>/<from>-<to>/rank_N`` paths, in their order, once each."""
    return list(dict.fromkeys(Path(p).parent.name for p in rank_dirs))


def _is_run_dir(path: Path) -> bool:
    return any((path / name).is_file() for name in layout.MARKERS)


def find_run_dirs(save_dir: Path) -> list[Path]:
    """Run directories at ``save_dir``, ``save_dir/<run>`` or ``save_dir/<project>/<run>`` (symlinks skipped)."""
    if _is_run_dir(save_dir):
        return [save_dir]
    found = []
    for child in subdirs(save_dir):
        if _is_run_dir(child):
            found.append(child)
        else:
            found.extend(d for d in subdirs(child) if _is_run_dir(d))
    return found


def read_record(path: Path, problems: list[str]) -> RunRecord | None:
    """The run.json of the run at ``path``; None (and a note in ``problems``) when missing or half-written."""
    try:
        return read_run_record(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        problems.append(f"{layout.RUN_JSON} unreadable")
        return None


def last_records(path: Path, keys: tuple[str, ...]) -> dict[str, JsonObject]:
    """For each key, the last record of a JSON Lines file that has it: from its last 64 KiB, else its last 4 MiB (a
    long run's file is never read whole; most runs' last record has every key)."""
    found: dict[str, JsonObject] = {}
    for max_bytes in (RECORD_TAIL_BYTES, TAIL_BYTES):
        found = {}
        try:
            for record in tail_rows(path, max_bytes):
                for key in keys:
                    if key in record and key not in found:
                        found[key] = record
                if len(found) == len(keys):
                    return found
        except OSError:
            return found
    return found


def _count_lines(path: Path) -> int | None:
    try:
        with open(path, "rb") as handle:
            return sum(1 for line in handle if line.strip())
    except OSError:
        return None


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


def is_stale(heartbeat: dict | None, run: RunRecord | None, start: datetime | None, age_s: float | None,
             stale_after_s: float) -> bool:
    """A running run is stale when its pid is gone on this host, else when its heartbeat is too old."""
    recorded = run or RunRecord()
    if heartbeat:
        host, pid = heartbeat.get("host", recorded.host), heartbeat.get("pid", recorded.pid)
    else:
        host, pid = recorded.host, recorded.pid
    if procs.on_this_host(host) and isinstance(pid, int):
        return not procs.pid_running(pid, None if start is None else start.timestamp() + 5)
    return age_s is None or age_s > stale_after_s


def read_run(path: Path, save_dir: Path, stale_after_s: float = STALE_AFTER_S, now: float | None = None,
             ranks: RankReport | None = None) -> RunInfo:
    """Summarise one run directory (``ranks``: its ranks already read); never raises on a bad or missing file."""
    now = time.time() if now is None else now
    problems: list[str] = []
    run = read_record(path, problems)
    recorded = run or RunRecord()
    heartbeat = first_heartbeat(path)
    rel = path.relative_to(save_dir).parts if path != save_dir else (path.parent.name, path.name)
    project = recorded.project_name or (rel[0] if len(rel) > 1 else "-")
    if run is None and "run.json unreadable" not in problems:
        problems.append("no run.json")
    start, end = recorded.started_at, recorded.ended_at
    modified = end.timestamp() if start and end else last_modified(path)  # a run that ended: no walk of its files
    beat = as_number((heartbeat or {}).get("alive"))  # refreshed every second by the rank's own thread
    heartbeat_age_s = now - beat if beat is not None else None
    metric = last_records(path / layout.METRICS, ("loss", "step"))
    steps = [recorded.last_step, (heartbeat or {}).get("ended"), metric.get("step", {}).get("step")]
    known = [int(s) for s in steps if isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s)]
    ranks = ranks or report(path, now)
    alerts = _count_lines(path / layout.ALERTS)
    status, stale = "unknown", False
    if recorded.status is RunStatus.RUNNING or (recorded.status is None and heartbeat is not None):
        age = heartbeat_age_s
        if age is None:
            age = now - (start.timestamp() if start else modified)
        stale = is_stale(heartbeat, run, start, age, stale_after_s)
        status = "stale" if stale else RunStatus.RUNNING.value
    elif recorded.status is not None:
        status = recorded.status.value
    duration_s = None
    if start is not None:
        finished = end.timestamp() if end else (now if status == RunStatus.RUNNING else beat or modified)
        duration_s = max(0.0, finished - start.timestamp())
    return RunInfo(
        path=path, project=project, run=recorded.run_name or path.name, problems=problems,
        status=status, stale=stale, start=start, end=end, duration_s=duration_s, last_modified=modified,
        heartbeat_age_s=heartbeat_age_s, last_step=max(known) if known else None,
        last_loss=as_number(metric.get("loss", {}).get("loss")),
        alert_count=alerts if alerts is not None else recorded.alert_count,
        rollbacks=len(recorded.rollbacks), ranks=[state.to_json(now) for state in ranks.states],
        ranks_summary=summarize(ranks.states).cell(), profiles=window_dirs(path, layout.PROFILES),
        distributions=window_dirs(path, layout.DISTRIBUTIONS),
    )


def previous_run(save_dir: Path, run_dir: Path) -> Path | None:
    """The run of the same project that started last before ``run_dir`` (None when it is the first)."""
    if not save_dir.is_dir():
        return None
    this = read_run(run_dir, save_dir)
    earlier = [r for r in list_runs(save_dir) if r.project == this.project and r.path.resolve() != run_dir.resolve()
               and (this.start is None or r.start is None or r.start <= this.start)]
    return earlier[-1].path if earlier else None


def rank_status(run_dir: str | os.PathLike[str]) -> tuple[RunInfo, RankReport]:
    """``msmon status``: the run and each of its ranks now; MsmonError when it is not a run directory."""
    path = Path(run_dir)
    if not os.path.isdir(path) or not _is_run_dir(path):  # os.path: False for a name too long
        raise MsmonError(f"{path}: not a run directory (no {', '.join(layout.MARKERS)})",
                         "pass <save_dir>/<project>/<run>; `msmon runs SAVE_DIR` lists them")
    now = time.time()
    ranks = report(path, now)  # read once: 1,024 heartbeats are most of the command's time
    return read_run(path, path.parent.parent, now=now, ranks=ranks), ranks


def list_runs(save_dir: str | os.PathLike[str], stale_after_s: float = STALE_AFTER_S) -> list[RunInfo]:
    """Every run under ``save_dir``, oldest start first; MsmonError when the directory does not exist."""
    root = Path(save_dir)
    if not os.path.isdir(root):
        raise MsmonError(f"{root}: no such directory", "pass the save_dir of the runs (monitor_config.save_dir)")
    runs = [read_run(p, root, stale_after_s) for p in find_run_dirs(root)]
    return sorted(runs, key=lambda r: (r.start.timestamp() if r.start else r.last_modified, r.project, r.run))
