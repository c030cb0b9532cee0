"""`msmon clean SAVE_DIR --older-than 3d [--profiles]`: free disk by removing old run directories (or only their
profiles)."""

from __future__ import annotations

from pathlib import Path

import typer

from msmon.cli.common import handle_errors
from msmon.errors import MsmonError


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


@handle_errors
def clean(
    save_dir: Path = typer.Argument(..., help="The save_dir holding <project>/<run> directories."),
    older_than: str = typer.Option(..., "--older-than", help="Remove runs last active longer ago: 3d, 12h, 30m."),
    keep_last: int = typer.Option(0, "--keep-last", help="Always keep the N most recent runs of each project."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only print what would be removed."),
    profiles: bool = typer.Option(False, "--profiles",
                                  help="Remove only the runs' profiles/ (operator profiles); the runs stay."),
) -> None:
    """Remove run directories older than a limit (or, with --profiles, only their profiles); never from a running
    run, never anything outside SAVE_DIR."""
    from msmon.ops.clean import clean as clean_runs
    from msmon.util.durations import format_duration, parse_duration

    result = clean_runs(save_dir, parse_duration(older_than), keep_last=keep_last, dry_run=dry_run,
                        profiles_only=profiles)
    verb = "would remove" if dry_run else "removed"
    what = "the profiles of " if profiles else ""
    for entry in result.removed:
        info = entry.info
        age = format_duration(entry.age_s)
        print(f"{verb} {what}{info.project}/{info.run}  {_mb(entry.size_bytes)}  (last active {age} ago)")
    for entry in result.kept:
        if entry.reason not in ("newer than the limit", "no profiles"):
            print(f"kept {entry.info.project}/{entry.info.run}: {entry.reason}")
    total = f"{_mb(result.freed_bytes)} from {len(result.removed)} run(s)"
    print(f"would free {total} (dry run: nothing removed)" if dry_run else f"freed {total}")
    if result.errors:
        raise MsmonError(f"could not remove {len(result.errors)} file(s): {result.errors[0]}", "check permissions")


def register(app: typer.Typer) -> None:
    app.command("clean")(clean)
