"""Remove old run directories under a save_dir, or only their profiles (``profiles/``, the heavy part: docs/probe.md):
never from a running run, never anything outside the save_dir."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from msmon import layout
from msmon.errors import ExitCode, MsmonError
from msmon.ops.runs import RunInfo, find_run_dirs, read_run
from msmon.status import RunStatus
from msmon.util.files import tree_size


@dataclass
class CleanEntry:
    """One run directory and what happens to it."""

    info: RunInfo
    age_s: float
    size_bytes: int
    reason: str  # why it is kept, or "older than the limit"

    def target(self, profiles_only: bool) -> Path:
        """What goes: the run directory, or only its profiles."""
        return self.info.path / layout.PROFILES if profiles_only else self.info.path


@dataclass
class CleanResult:
    removed: list[CleanEntry] = field(default_factory=list)
    kept: list[CleanEntry] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    dry_run: bool = False
    profiles_only: bool = False

    @property
    def freed_bytes(self) -> int:
        return sum(e.size_bytes for e in self.removed)


def _reference_time(info: RunInfo) -> float:
    """When the run last did something: its end time, else the newest file in it."""
    return info.end.timestamp() if info.end else info.last_modified


def _inside(path: Path, save_dir: Path) -> bool:
    """``path`` is strictly below ``save_dir`` and no symlink lies on the way from ``save_dir`` to it."""
    root = save_dir.resolve()
    if path.resolve() == root or not path.resolve().is_relative_to(root):
        return False
    current = save_dir
    for part in path.relative_to(save_dir).parts:
        current = current / part
        if current.is_symlink():
            return False
    return True


def plan(save_dir: Path, older_than_s: float, keep_last: int = 0, now: float | None = None,
         profiles_only: bool = False) -> CleanResult:
    """Decide, without touching anything, which run directories (``profiles_only``: which runs' profiles) go and
    which stay (and why)."""
    now = time.time() if now is None else now
    entries = []
    for path in find_run_dirs(save_dir):
        info = read_run(path, save_dir)
        entries.append(CleanEntry(info, now - _reference_time(info), 0, ""))
    recent: dict[str, list[CleanEntry]] = {}
    for entry in sorted(entries, key=lambda e: e.age_s):
        recent.setdefault(entry.info.project, []).append(entry)
    newest = {id(e) for group in recent.values() for e in group[:keep_last]}
    result = CleanResult(profiles_only=profiles_only)
    for entry in entries:
        if profiles_only and not entry.info.profiles:
            entry.reason = "no profiles"
        elif entry.info.status == RunStatus.RUNNING:
            entry.reason = "running (fresh heartbeat)"
        elif not _inside(entry.info.path, save_dir):
            entry.reason = "not a directory strictly inside the save_dir"
        elif id(entry) in newest:
            entry.reason = f"among the last {keep_last} of its project"
        elif entry.age_s < older_than_s:
            entry.reason = "newer than the limit"
        else:
            entry.reason = "older than the limit"
            entry.size_bytes = tree_size(entry.target(profiles_only))
            result.removed.append(entry)
            continue
        result.kept.append(entry)
    return result


def clean(
    save_dir: str | os.PathLike[str], older_than_s: float, keep_last: int = 0, dry_run: bool = False,
    profiles_only: bool = False,
) -> CleanResult:
    """Remove run directories older than ``older_than_s`` (keeping the last ``keep_last`` per project);
    ``profiles_only``: only their ``profiles/``, the runs stay."""
    root = Path(save_dir)
    if not root.is_dir():
        raise MsmonError(f"{root}: no such directory", "pass the save_dir of the runs (monitor_config.save_dir)")
    if keep_last < 0:
        raise MsmonError(f"--keep-last {keep_last} is negative", "pass 0 or more", ExitCode.USAGE)
    result = plan(root, older_than_s, keep_last, profiles_only=profiles_only)
    result.dry_run = dry_run
    if dry_run:
        return result
    errors: list[str] = []
    for entry in list(result.removed):
        path = entry.info.path
        if read_run(path, root).status == RunStatus.RUNNING:  # it came back to life since the plan
            result.removed.remove(entry)
            entry.reason = "running (fresh heartbeat)"
            result.kept.append(entry)
            continue
        shutil.rmtree(entry.target(profiles_only), onerror=lambda _f, p, exc: errors.append(f"{p}: {exc[1]}"))
        if not profiles_only and path.parent != root and path.parent.is_dir() and not any(path.parent.iterdir()):
            path.parent.rmdir()
    result.errors = errors
    return result
