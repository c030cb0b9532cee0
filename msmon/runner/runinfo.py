"""``run.json``: what ran, where, with what, and how it ended (rewritten atomically)."""

from __future__ import annotations

import platform
import socket
from datetime import datetime
from pathlib import Path
from typing import Any

from msmon import layout
from msmon.compat import package_version
from msmon.runner.rundir import mask_url_passwords
from msmon.status import RunStatus
from msmon.util.atomic import atomic_write_json
from msmon.util.git import git_commit
from msmon.util.internal_errors import InternalErrors
from msmon.util.jsonfiles import read_json_object


def now_iso() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


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
        "status": RunStatus.RUNNING.value,
        "last_step": None,
        "exit_code": None,
        "dropped_records": 0,
        "records_lost": 0,
        "backends_failed_to_close": [],
        "backends": {},
        "alert_count": 0,
        "internal_errors": 0,
        "first_internal_error": None,
        "error": None,
    }


def finish_info(
    info: dict[str, Any],
    *,
    status: RunStatus,
    exit_code: int,
    last_step: int | None,
    dropped_records: int,
    alert_count: int,
    error: str | None,
    internal: InternalErrors,
    accounting: dict[str, Any] | None = None,
    note: str | None = None,
    framework: tuple[int, int] = (0, 0),
) -> dict[str, Any]:
    """``info`` with the end of the run filled in (``accounting``: records_lost, backends_failed_to_close,
    backends, as results.backend_accounting gives them; ``note``: why a completed run ended before its last step,
    run.json's ``note``, only then; ``framework``: the warning and error lines of the framework's output)."""
    return dict(
        info, status=status.value, exit_code=exit_code, last_step=last_step, end_time=now_iso(),
        dropped_records=dropped_records, alert_count=alert_count, error=error, internal_errors=internal.count,
        first_internal_error=internal.first, framework_warnings=framework[0], framework_errors=framework[1],
        **(accounting or {}), **({"note": note} if note else {}),
    )


def write_run_info(run_dir: Path, info: dict[str, Any], name: str = layout.RUN_JSON) -> None:
    """Write run.json atomically (its directory recreated if it was removed during the run)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(run_dir / name, info)


def read_run_info(run_dir: Path) -> dict[str, Any]:
    return read_json_object(run_dir / layout.RUN_JSON)
