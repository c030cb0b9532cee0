"""`msmon compare RUN_A RUN_B [...] [--out FILE.html]`: runs side by side."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from msmon.cli.common import handle_errors, stdout_console
from msmon.cli.complete import run_dirs

if TYPE_CHECKING:
    from msmon.reference.parting import Verdict
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
    check: bool = typer.Option(False, "--assert", help="Exit 6 when the first run leaves the band of the others "
                               "(health.reference_drift's defaults), naming the first step and metric; else 0. "
                               "With --out the page draws the band and marks that step."),
    exact: bool = typer.Option(False, "--exact", help="With --assert: the curves must agree bit for bit at every "
                               "common logged step (loss, grad_norm, learning_rate)."),
    tolerance: float = typer.Option(None, "--tolerance", min=0.0, help="With --assert: the band is never narrower "
                                    "than this fraction (default 0.05)."),
) -> None:
    """Overlay runs' curves, show the config keys that differ (hyperparameters first), final and best loss.
    --assert judges the first run against the others (exit 0 agree, 6 parted)."""
    verdict = None
    if check or exact:
        from msmon.health.agreement import judge

        verdict = judge([str(path) for path in runs], exact, tolerance)
        print(f"compare: {verdict.line}", file=sys.stderr if verdict.parting is not None else sys.stdout)
        if out is None and png is None:
            _exit(verdict)
            return
    from msmon.view.compare import compare_runs, write_compare

    comparison = compare_runs(list(runs))
    for note in comparison.notes:
        print(f"note: {note}", file=sys.stderr)
    if out is None:
        if verdict is None:
            _print_tables(comparison)
    else:
        print(f"compare: {write_compare(comparison, out, verdict)}")
    if png is not None:
        from msmon.view.png import write_pngs

        for path in write_pngs(comparison.runs, png):
            print(f"png: {path}")
    _exit(verdict)


def _exit(verdict: Verdict | None) -> None:
    """Exit 6 (``ExitCode.CURVES_PART``) when ``compare --assert`` found the curves part."""
    if verdict is not None and verdict.parting is not None:
        from msmon.errors import ExitCode

        raise typer.Exit(ExitCode.CURVES_PART)


def register(app: typer.Typer) -> None:
    """Add `msmon compare`."""
    app.command("compare")(compare)
