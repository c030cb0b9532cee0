"""`msmon report RUN [--out FILE.html] [--png DIR]`: a self-contained HTML report of one run."""

from __future__ import annotations

from pathlib import Path

import typer

from msmon.cli.common import handle_errors
from msmon.cli.complete import run_dirs


@handle_errors
def report(
    run: Path = typer.Argument(..., help="Run directory (<save_dir>/<project_name>/<run_name>).",
                               autocompletion=run_dirs),
    out: Path | None = typer.Option(None, "--out", "-o", help="HTML file to write; default: <run>/report.html."),
    png: Path | None = typer.Option(None, "--png", help="Also write the plots as PNG images into this directory."),
) -> None:
    """Write one HTML file (no network needed to open it) with the run's metadata, config, plots and alerts."""
    from msmon.view.report import write_report

    html_path, pngs = write_report(run, out, png)
    print(f"report: {html_path}")
    for path in pngs:
        print(f"png: {path}")


def register(app: typer.Typer) -> None:
    """Add `msmon report`."""
    app.command("report")(report)
