"""Which directory a board serves: a save_dir, a run tree, or the save_dir of a training YAML."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from msmon import layout
from msmon.config.schema import DEFAULT_SAVE_DIR
from msmon.errors import ExitCode, MsmonError
from msmon.util.files import subdirs

log = logging.getLogger("msmon")

_SUMMARY = re.compile(r"summary\.\d+|\.pb$|tfevents")


def _has_summary(directory: Path) -> bool:
    """Summary or event files, or an msmon run that will write them, directly in ``directory``."""
    try:
        return any(
            e.is_file(follow_symlinks=False) and (_SUMMARY.search(e.name) or e.name in layout.MARKERS)
            for e in os.scandir(directory)
        )
    except OSError:
        return False


def _from_config(path: Path) -> Path:
    """``<save_dir>/<project_name>`` of a training YAML (``<save_dir>`` when the project has no runs yet)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from msmon.config.loader import load_config

    loaded = load_config(path)
    try:
        save_dir = OmegaConf.select(loaded.conf, "monitor_config.save_dir", default=None) or DEFAULT_SAVE_DIR
        project = OmegaConf.select(loaded.conf, "monitor_config.project_name", default=None) or "default"
    except OmegaConfBaseException as exc:
        raise MsmonError(f"{path}: cannot resolve monitor_config.save_dir: {exc}", "fix the interpolation") from exc
    base = Path(str(save_dir)).expanduser()
    return base / str(project) if (base / str(project)).is_dir() else base


def _mindinsight_base(directory: Path) -> Path:
    """MindInsight 2.3.1 lists summary directories one level deep only: serve the project level."""
    if _has_summary(directory) or any(_has_summary(d) for d in subdirs(directory)):
        return directory
    projects = [d for d in subdirs(directory) if any(_has_summary(r) for r in subdirs(d))]
    if not projects:
        return directory
    projects.sort(key=lambda d: d.stat().st_mtime, reverse=True)
    if len(projects) > 1:
        others = ", ".join(str(p) for p in projects[1:])
        log.warning(
            "MindInsight lists runs one directory level deep: serving the latest project %s "
            "(start another board for: %s)", projects[0], others,
        )
    return projects[0]


def resolve_board_dir(path: str | os.PathLike[str] | None, backend: str) -> Path:
    """The absolute directory to serve; MsmonError (exit 5) when it does not exist."""
    given = Path(path if path is not None else DEFAULT_SAVE_DIR).expanduser()
    if os.path.isfile(given) and given.suffix.lower() in (".yaml", ".yml"):  # os.path: False for a name too long
        directory = _from_config(given)
    elif os.path.exists(given) and not os.path.isdir(given):
        raise MsmonError(
            f"{given}: not a directory or a .yaml config", "pass a save_dir or a training YAML", ExitCode.BOARD_FAILED
        )
    else:
        directory = given
    if not os.path.isdir(directory):
        raise MsmonError(
            f"board directory {directory} does not exist",
            "train first (msmon run CONFIG) or pass the save_dir that holds the runs",
            ExitCode.BOARD_FAILED,
        )
    directory = directory.resolve()
    return _mindinsight_base(directory) if backend == "mindinsight" else directory
