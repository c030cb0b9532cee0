"""`msmon compare`: overlay runs' curves, list the config keys that differ, summarise each run's loss."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from msmon.config.hyperparameters import config_key_rank
from msmon.errors import ExitCode, MsmonError
from msmon.foreign import ConfigValue
from msmon.reference.parting import Verdict
from msmon.util.mapping import flatten
from msmon.util.numbers import fmt_number
from msmon.view.band import with_bands
from msmon.view.html import PALETTE, panel, panel_metrics, render, write_page
from msmon.view.report import alert_rows, loss_summary
from msmon.view.series import RunData, load_run
from msmon.view.sketch import median

MISSING = "<absent>"


def differing_keys(configs: list[dict[str, ConfigValue]]) -> list[tuple[str, list[ConfigValue]]]:
    """Keys whose values are not the same in every config (absent counts as a value), hyperparameters first
    (``msmon.config.hyperparameters``)."""
    flats = [flatten(c) for c in configs]
    keys = {k for flat in flats for k in flat}
    rows = []
    for key in keys:
        values = [flat.get(key, MISSING) for flat in flats]
        if any(json.dumps(v, sort_keys=True, default=str) != json.dumps(values[0], sort_keys=True, default=str)
               for v in values[1:]):
            rows.append((key, values))
    return sorted(rows, key=lambda row: (*config_key_rank(row[0]), row[0]))


@dataclass
class RunSummary:
    """The numbers compared per run."""

    label: str
    status: str
    logged_steps: int
    last_step: int | None
    final_loss: float | None
    best_loss: float | None
    best_step: int | None
    median_throughput: float | None
    alerts: int


def summarise(label: str, run: RunData) -> RunSummary:
    """Final and best loss, step counts, median throughput and alert count of one run."""
    final, best, best_step = loss_summary(run)
    return RunSummary(
        label=label,
        status=str(run.info.get("status", "unknown")),
        logged_steps=run.records.logged,
        last_step=run.records.last_step,
        final_loss=final,
        best_loss=best,
        best_step=best_step,
        median_throughput=median(run.sketch("throughput")),
        alerts=len(run.alerts),
    )


@dataclass
class Comparison:
    """Runs side by side: their labels, the keys of the config that trained which differ, msmon's own
    monitor_config keys that differ (apart), and the summary numbers."""

    runs: list[RunData]
    labels: list[str]
    diff: list[tuple[str, list[ConfigValue]]]
    summaries: list[RunSummary]
    notes: list[str]
    monitor_diff: list[tuple[str, list[ConfigValue]]] = field(default_factory=list)

    def no_diff_text(self) -> str:
        """What to say when no key differs."""
        if all(run.config is None for run in self.runs):
            return "No run has a readable config: nothing to compare."
        return "The configs that trained are identical."


def _labels(runs: list[RunData]) -> list[str]:
    names = [run.name for run in runs]
    if len(set(names)) == len(names):
        return names
    labels = [f"{run.info.get('project_name', run.path.parent.name)}/{run.name}" for run in runs]
    return labels if len(set(labels)) == len(labels) else [str(run.path) for run in runs]


def compare_runs(paths: list[str | Path]) -> Comparison:
    """Load the runs and compute what differs between them."""
    if len(paths) < 2:
        raise MsmonError("compare needs at least two runs", "msmon compare RUN_A RUN_B [...]", ExitCode.USAGE)
    runs = [load_run(p) for p in paths]
    if len({run.path.resolve() for run in runs}) < len(runs):
        raise MsmonError("the same run was given twice", "pass different run directories", ExitCode.USAGE)
    labels = _labels(runs)
    notes = [f"{label}: {note}" for label, run in zip(labels, runs, strict=True) for note in run.notes]
    configs = []
    for label, run in zip(labels, runs, strict=True):
        if run.config is None:
            notes.append(f"{label}: no readable config; its keys count as absent")
        configs.append(run.config or {})
    monitors = [{"monitor_config": run.monitor} if run.monitor is not None else {} for run in runs]
    summaries = [summarise(label, run) for label, run in zip(labels, runs, strict=True)]
    return Comparison(runs, labels, differing_keys(configs), summaries, notes, differing_keys(monitors))


def show_value(value: object) -> str:
    """A config value as short text."""
    if value is MISSING or value == MISSING:
        return MISSING
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return str(value)


def summary_cells(summary: RunSummary) -> list[str]:
    """The summary row of one run as text cells (see SUMMARY_HEADERS)."""
    best = f"{fmt_number(summary.best_loss, 5)} @ {summary.best_step}" if summary.best_loss is not None else "-"
    return [summary.label, summary.status, str(summary.logged_steps), str(summary.last_step or "-"),
            fmt_number(summary.final_loss, 5), best, fmt_number(summary.median_throughput, 5), str(summary.alerts)]


SUMMARY_HEADERS: tuple[str, ...] = ("run", "status", "logged", "last step", "final loss", "best loss @ step",
                                    "median tokens/s", "alerts")


def build_compare(comparison: Comparison, verdict: Verdict | None = None) -> str:
    """The comparison page: legend, summaries, differing keys and overlaid plots; with ``compare --assert``'s
    ``verdict``, the band the first run was judged against and the step where it parts."""
    runs = comparison.runs
    labelled = [RunData(r.path, {**r.info, "run_name": label}, r.config_text, r.config, r.records, [])
                for r, label in zip(runs, comparison.labels, strict=True)]
    band = verdict.band if verdict is not None else None
    panels = with_bands([panel(m, labelled) for m in panel_metrics(labelled)], band)
    parting = verdict.parting if verdict is not None else None
    partings = ([{"step": parting.step, "metric": parting.metric, "label": f"parts: {parting.metric}"}]
                if parting is not None else [])
    data = {"panels": panels, "alerts": alert_rows([]), "partings": partings}
    return render(
        "compare.html.j2", "msmon compare: " + " vs ".join(comparison.labels), data, panels,
        alert_markers=False, plot_note="Alerts are marked in each run's own report.", labels=comparison.labels,
        legend=[(label, PALETTE[i % len(PALETTE)]) for i, label in enumerate(comparison.labels)],
        notes=comparison.notes, summary_headers=SUMMARY_HEADERS,
        summary_rows=[summary_cells(s) for s in comparison.summaries],
        diff=[(key, [show_value(v) for v in values]) for key, values in comparison.diff],
        monitor_diff=[(key, [show_value(v) for v in values]) for key, values in comparison.monitor_diff],
        no_diff_text=comparison.no_diff_text(), paths=[str(r.path) for r in runs],
        verdict=verdict.line if verdict is not None else None,
    )


def write_compare(comparison: Comparison, out: str | Path, verdict: Verdict | None = None) -> Path:
    """Write the comparison page to ``out`` (``verdict``: see ``build_compare``)."""
    return write_page(Path(out), build_compare(comparison, verdict), "compare.html")
