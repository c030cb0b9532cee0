"""Before a run is resumed (``msmon run CONFIG --resume``, ``msmon resume RUN_DIR``): the run exists, is not running,
and has a complete checkpoint that fits the plan. Each failure is one line (exit 1) and nothing is created."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

from msmon import layout
from msmon.errors import MsmonError
from msmon.runner.checkpoints import ResumePoint, check_fits, latest_checkpoint
from msmon.status import RunStatus
from msmon.util import procs
from msmon.util.jsonfiles import read_json_object

GENERATED_NAME_HINT = ("a run_name that is generated (auto, ${now:...}) names a new run each time: "
                       "continue a run with `msmon resume RUN_DIR`")


def recorded_info(run_dir: Path) -> dict[str, Any] | None:
    """The run's run.json, or None when it has none (or it is unreadable)."""
    try:
        return read_json_object(run_dir / layout.RUN_JSON)
    except (OSError, ValueError):
        return None


def still_running(info: Mapping[str, Any]) -> bool:
    """Whether the ``msmon run`` that wrote ``info`` still runs on this host."""
    pid = info.get("pid")
    if info.get("status") != RunStatus.RUNNING or info.get("host") != socket.gethostname():
        return False
    if not procs.pid_running(pid):
        return False
    return any("msmon" in part for part in procs.cmdline(psutil.Process(int(pid))))  # type: ignore[arg-type]


def has_checkpoint_monitor(training: Mapping[str, Any]) -> bool:
    callbacks = training.get("callbacks")
    return any(isinstance(cb, Mapping) and cb.get("type") == "CheckpointMonitor"
               for cb in (callbacks if isinstance(callbacks, list) else []))


def resume_point(run_dir: Path, *, training: Mapping[str, Any], world_size: int,
                 joins_run: bool = False) -> ResumePoint:
    """The checkpoint the run at ``run_dir`` resumes from; MsmonError saying why there is none that fits."""
    info = recorded_info(run_dir)
    if not joins_run:  # node 0 owns run.json; the other machines of a multi-machine run join the directory
        if info is None and not run_dir.is_dir():
            raise MsmonError(f"nothing to resume at {run_dir}: no run directory", GENERATED_NAME_HINT)
        if info is None:
            raise MsmonError(f"nothing to resume at {run_dir}: no readable run.json",
                             "it is not the run directory of an `msmon run`; start a new run")
        if still_running(info):
            raise MsmonError(f"run {run_dir} is still running (msmon pid {info.get('pid')})",
                             "stop it first (Ctrl-C in its terminal), or watch it with `msmon runs`")
    point = latest_checkpoint(run_dir)
    if point is None:
        hint = ("add a CheckpointMonitor callback to the config (save_checkpoint_steps) so a run can be resumed"
                if not has_checkpoint_monitor(training) else "the run ended before it saved its first checkpoint")
        raise MsmonError(f"no complete checkpoint to resume from in {run_dir / layout.CHECKPOINTS}", hint)
    check_fits(point, training, world_size, (info or {}).get("layout"))
    return point
