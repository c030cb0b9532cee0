"""``run.json``: what ran, where, with what, and how it ended (rewritten atomically)."""

from __future__ import annotations

import json
import platform
import socket
import subprocess
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from msmon.runner.rundir import mask_url_passwords
from msmon.util.atomic import atomic_write_json

RUN_JSON = "run.json"
STATUSES = ("running", "completed", "failed", "interrupted", "stopped_by_monitor")


def now_iso() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def package_version(name: str) -> str | None:
    """An installed distribution's version, without importing it."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def git_commit(directory: Path) -> str | None:
    """HEAD of the git repository holding ``directory``, or None."""
    try:
        out = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=5, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and len(commit) == 40 else None


def start_info(
    *,
    config_path: str | None,
    project_name: str,
    run_name: str,
    run_dir: Path,
    command: list[str],
    device_target: str,
    device_count: int,
    total_steps: int | None,
    cwd: Path,
    pid: int,
) -> dict[str, Any]:
    """The run.json of a run that has just started (status ``running``)."""
    return {
        "msmon_version": package_version("msmon"),
        "mindspore_version": package_version("mindspore"),
        "mindformers_version": package_version("mindformers"),
        "python_version": platform.python_version(),
        "device_target": device_target,
        "device_count": device_count,
        "host": socket.gethostname(),
        "pid": pid,
        "command": [mask_url_passwords(arg) for arg in command],
        "cwd": str(cwd),
        "git_commit": git_commit(cwd),
        "config_path": config_path,
        "project_name": project_name,
        "run_name": run_name,
        "run_dir": str(run_dir),
        "total_steps": total_steps,
        "start_time": now_iso(),
        "end_time": None,
        "status": "running",
        "last_step": None,
        "exit_code": None,
        "dropped_records": 0,
        "alert_count": 0,
        "error": None,
    }


def finish_info(
    info: dict[str, Any],
    *,
    status: str,
    exit_code: int,
    last_step: int | None,
    dropped_records: int,
    alert_count: int,
    error: str | None,
) -> dict[str, Any]:
    """``info`` with the end of the run filled in."""
    if status not in STATUSES:
        raise ValueError(f"unknown run status {status!r}")
    return dict(
        info, status=status, exit_code=exit_code, last_step=last_step, end_time=now_iso(),
        dropped_records=dropped_records, alert_count=alert_count, error=error,
    )


def write_run_info(run_dir: Path, info: dict[str, Any], name: str = RUN_JSON) -> None:
    atomic_write_json(run_dir / name, info)


def read_run_info(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / RUN_JSON).read_text(encoding="utf-8"))
