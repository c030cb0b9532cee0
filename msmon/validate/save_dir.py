"""save_dir: ASCII, no whitespace, a directory on a disk (not a kernel pseudo file system) that is writable or
creatable, enough free disk (MS2xx)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from msmon.findings import Finding, error, warning
from msmon.util.files import PSEUDO_FILESYSTEMS, filesystem_type
from msmon.validate.context import CheckContext

PATH = "monitor_config.save_dir"


def _existing_ancestor(path: Path) -> Path:
    current = path
    while not os.path.exists(current) and current != current.parent:  # False for a name too long, unlike Path
        current = current.parent
    return current


def name_max(directory: Path) -> int:
    """The longest file name (bytes) the file system of ``directory`` takes (255 where it does not say)."""
    try:
        return os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def free_space_mb(path: Path) -> float:
    """Free disk in MB on the filesystem that holds ``path`` (or would, once created)."""
    return shutil.disk_usage(_existing_ancestor(path)).free / 2**20


def check_save_dir(ctx: CheckContext) -> list[Finding]:
    raw = ctx.settings.save_dir
    if not raw.strip():
        return [error("MS202", PATH, "save_dir is empty", "write a directory such as ./monitor_logs")]
    resolved = ctx.save_dir()
    if "mindinsight" in ctx.settings.monitor_type and not str(resolved).isascii():
        where = "" if raw.isascii() else f"save_dir {raw!r}: "
        return [
            error(
                "MS201",
                PATH,
                f"{where}{resolved} contains non-ASCII characters: MindInsight's log parser cannot load such paths"
                " and the board stays empty",
                "use an ASCII-only path such as /data/monitor_logs (an absolute one when the working directory "
                "has non-ASCII characters), or drop mindinsight from monitor_type",
            )
        ]
    if any(ch.isspace() or not ch.isprintable() for ch in raw):
        return [
            error(
                "MS202",
                PATH,
                f"save_dir {raw!r} contains whitespace or control characters: the board's log parser splits on them",
                "use a path without spaces, e.g. ./monitor_logs",
            )
        ]
    path = ctx.save_dir()
    ancestor = _existing_ancestor(path)
    too_long = next((part for part in path.parts if len(os.fsencode(part)) > name_max(ancestor)), None)
    if too_long is not None:
        return [error("MS203", PATH, f"save_dir {str(path)[:60]}...: the name {too_long[:20]}... is longer than the "
                      f"{name_max(ancestor)} bytes a file name may have there", "use shorter directory names")]
    if os.path.exists(path) and not os.path.isdir(path):
        return [error("MS203", PATH, f"save_dir {path} exists and is not a directory", "point save_dir to a directory")]
    if not ancestor.is_dir():
        return [error("MS203", PATH, f"save_dir {path} cannot be created: {ancestor} is a file", "fix the path")]
    kind = filesystem_type(ancestor)
    if kind in PSEUDO_FILESYSTEMS:
        return [error("MS203", PATH, f"save_dir {path} lies on the kernel's {kind} file system ({ancestor}), which "
                      "holds no files of a program's", "choose a directory on a disk, e.g. ./monitor_logs")]
    if not os.access(ancestor, os.W_OK | os.X_OK):
        what = "is not writable" if ancestor == path else f"cannot be created: {ancestor} is not writable"
        return [error("MS203", PATH, f"save_dir {path} {what}", "choose a writable directory or fix its permissions")]
    free_mb = free_space_mb(path)
    floor = ctx.settings.disk.min_free_mb or 1024
    if free_mb < floor:
        return [
            warning(
                "MS204",
                PATH,
                f"only {free_mb:.0f} MB free under {ancestor} (below {floor} MB): summaries may fill the disk",
                "free space, clean old runs with `msmon clean`, or move save_dir",
            )
        ]
    return []
