"""`msmon runs SAVE_DIR`: every run at a glance (status, progress, last loss, alerts, heartbeat)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from msmon.cli.common import handle_errors, wide_console
from msmon.status import RunStatus

if TYPE_CHECKING:  # the run table's module (psutil, the heartbeats) only when a command reads runs
    from msmon.ops.runs import RunInfo

STATUS_COLOURS = {
    RunStatus.RUNNING: "green", RunStatus.COMPLETED: "cyan", RunStatus.FAILED: "red", RunStatus.INTERRUPTED: "yellow",
    RunStatus.STOPPED_BY_MONITOR: "magenta", "stale": "bold red", "unknown": "dim",
}


def _loss(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


@handle_errors
def runs(
    save_dir: Path = typer.Argument(..., help="The save_dir holding <project>/<run> directories."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    stale_after: str = typer.Option(
        "10m", "--stale-after", help="A running run on another host is stale when its heartbeat is older than this."
    ),
) -> None:
    """List the runs under SAVE_DIR: project, run, status, start, duration, last step and loss, alerts, ranks,
    profiled windows, windows of histograms (`msmon status RUN` shows them one by one)."""
    from msmon.ops.runs import list_runs
    from msmon.util.durations import format_duration, parse_duration

    limit = parse_duration(stale_after)
    found = list_runs(save_dir, stale_after_s=limit)
    if as_json:
        print(json.dumps([r.to_json() for r in found], indent=2))
        return
    if not found:
        print(f"no runs under {save_dir}")
        return
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("project", "run", "status", "start", "duration", "step", "loss", "alerts", "heartbeat", "ranks",
                   "profiles", "histograms"):
        table.add_column(column, justify="right" if column in ("duration", "step", "loss", "alerts") else "left")
    for info in found:
        age = info.heartbeat_age_s
        beat = "-" if age is None else format_duration(age)
        if info.stale:
            beat = f"[bold red]{beat}[/]"
        elif age is not None and age > limit and info.status == RunStatus.RUNNING:
            beat = f"[yellow]{beat}[/]"
        table.add_row(
            info.project, info.run, f"[{STATUS_COLOURS.get(info.status, 'default')}]{info.status}[/]",
            info.start.strftime("%Y-%m-%d %H:%M") if info.start else "-", format_duration(info.duration_s),
            "-" if info.last_step is None else str(info.last_step), _loss(info.last_loss),
            alerts_cell(info), beat, info.ranks_summary, ", ".join(info.profile_windows) or "-",
            ", ".join(info.distribution_windows) or "-",
        )
    wide_console().print(table)


def alerts_cell(info: RunInfo) -> str:
    """The alert count, and the rollbacks among them: ``3 (1 rollback)``."""
    count = "-" if info.alert_count is None else str(info.alert_count)
    if not info.rollbacks:
        return count
    return f"{count} ({info.rollbacks} rollback{'s' if info.rollbacks > 1 else ''})"


def register(app: typer.Typer) -> None:
    app.command("runs")(runs)
