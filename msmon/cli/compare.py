"""`msmon compare RUN_A RUN_B [...] [--out FILE.html]`: runs side by side."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from msmon.cli.common import handle_errors, stdout_console
from msmon.cli.complete import run_dirs

if TYPE_CHECKING:
    from msmon.view.compare import Comparison


def _print_tables(comparison: Comparison) -> None:
    """The summary and the differing keys. Every column folds (no run name or key is ever cut) and a run's name
    keeps its width where the terminal has room for one per run."""
    from rich.table import Table

    from msmon.view.compare import SUMMARY_HEADERS, show_value, summary_cells

    console = stdout_console()
    name_width = min(max(map(len, comparison.labels)), console.width // (len(comparison.labels) + 1))
    summary = Table(title="Runs", title_justify="left")
    for header in SUMMARY_HEADERS:
        summary.add_column(header, justify="left" if header in ("run", "status") else "right", overflow="fold",
                           min_width=name_width if header == "run" else None)
    for item in comparison.summaries:
        summary.add_row(*summary_cells(item))
    console.print(summary)
    if not comparison.diff:
        console.print(comparison.no_diff_text())
    for title, rows in ((f"Config keys that differ ({len(comparison.diff)}): the config that trained",
                         comparison.diff),
                        (f"msmon's monitor_config keys that differ ({len(comparison.monitor_diff)})",
                         comparison.monitor_diff)):
        if not rows:
            continue
        diff = Table(title=title, title_justify="left")
        diff.add_column("config key", style="bold", overflow="fold")
        for label in comparison.labels:
            diff.add_column(label, overflow="fold", min_width=name_width)
        for key, values in rows:
            diff.add_row(key, *(show_value(v) for v in values))
        console.print(diff)


@handle_errors
def compare(
    runs: list[Path] = typer.Argument(..., help="Two or more run directories.", autocompletion=run_dirs),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write an HTML comparison with overlaid plots."),
    png: Path | None = typer.Option(None, "--png", help="Also write the overlaid plots as PNG images here."),
) -> None:
    """Overlay runs' curves, show the config keys that differ (hyperparameters first), final and best loss."""
    from msmon.view.compare import compare_runs, write_compare

    comparison = compare_runs(list(runs))
    for note in comparison.notes:
        print(f"note: {note}", file=sys.stderr)
    if out is None:
        _print_tables(comparison)
    else:
        print(f"compare: {write_compare(comparison, out)}")
    if png is not None:
        from msmon.view.png import write_pngs

        for path in write_pngs(comparison.runs, png):
            print(f"png: {path}")


def register(app: typer.Typer) -> None:
    """Add `msmon compare`."""
    app.command("compare")(compare)
