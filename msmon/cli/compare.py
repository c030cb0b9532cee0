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
    check: bool = typer.Option(False, "--assert", help="Exit 6 when the first run leaves the band of the others "
                               "(health.reference_drift's defaults), naming the first step and metric; else 0."),
    exact: bool = typer.Option(False, "--exact", help="With --assert: the curves must agree bit for bit at every "
                               "common logged step (loss, grad_norm, learning_rate)."),
    tolerance: float = typer.Option(None, "--tolerance", min=0.0, help="With --assert: the band is never narrower "
                                    "than this fraction (default 0.05)."),
) -> None:
    """Overlay runs' curves, show the config keys that differ (hyperparameters first), final and best loss.
    --assert judges the first run against the others (exit 0 agree, 6 parted)."""
    if check or exact:
        _assert(runs, exact, tolerance)
        return
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


def _assert(runs: list[Path], exact: bool, tolerance: float | None) -> None:
    """``--assert``: the first run against the others; one line, exit 0 or 6."""
    import dataclasses

    from msmon.config.health import ReferenceDriftSettings
    from msmon.errors import ExitCode, MsmonError
    from msmon.health.agreement import first_band_parting, first_exact_parting
    from msmon.reference import load_reference

    if len(runs) < 2:
        raise MsmonError("compare --assert needs a run and at least one reference", "pass two or more runs")
    run, *references = [load_reference(path) for path in runs]
    if exact:
        partings = [(ref, *first_exact_parting(run, ref)) for ref in references]
        parted = next(((ref, found) for ref, found, _ in partings if found is not None), None)
        if parted is None:
            steps = min(common for _, _, common in partings)
            print(f"compare: {runs[0]} equals {', '.join(map(str, runs[1:]))} bit for bit at every common logged "
                  f"step ({steps})")
            return
        ref, found = parted
        print(f"compare: {runs[0]} is not {ref.source} bit for bit: {found.describe()}", file=sys.stderr)
        raise typer.Exit(ExitCode.CURVES_PART)
    settings = ReferenceDriftSettings()
    settings = dataclasses.replace(settings, tolerance=tolerance) if tolerance is not None else settings
    band_parting = first_band_parting(run, references, settings)
    if band_parting is None:
        print(f"compare: {runs[0]} stays inside the band of {', '.join(map(str, runs[1:]))}")
        return
    print(f"compare: {runs[0]} leaves the band of {', '.join(map(str, runs[1:]))}: {band_parting.describe()}",
          file=sys.stderr)
    raise typer.Exit(ExitCode.CURVES_PART)


def register(app: typer.Typer) -> None:
    """Add `msmon compare`."""
    app.command("compare")(compare)
