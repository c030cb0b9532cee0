"""`msmon compare`: overlay runs' curves, list the config keys that differ, summarise each run's loss."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from msmon import __version__
from msmon.errors import ExitCode, MsmonError
from msmon.view.html import PALETTE, esc, fmt_number, page, panel, panel_metrics, plots_section, write_page
from msmon.view.report import alert_rows, loss_summary
from msmon.view.series import RunData, load_run

MAX_POINTS = 3000
MISSING = "<absent>"
#: Key names (any segment of the dotted path) that make a key a hyperparameter, most important first.
HYPERPARAMETERS: tuple[str, ...] = (
    "learning_rate", "lr", "lr_schedule", "warmup_steps", "warmup_ratio", "warmup_lr_init", "min_lr", "max_lr",
    "lr_end", "total_steps", "batch_size", "global_batch_size", "micro_batch_num", "gradient_accumulation_steps",
    "seed", "epochs", "weight_decay", "optimizer", "beta1", "betas", "eps", "max_grad_norm", "loss_scale_value",
    "hidden_size", "num_layers", "num_heads", "n_kv_heads", "intermediate_size", "vocab_size", "seq_length",
    "compute_dtype", "param_init_type", "data_parallel", "model_parallel", "pipeline_stage",
)


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as {dotted.key: leaf value}; lists are leaves."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def _rank(key: str) -> tuple[int, int, str]:
    segments = key.split(".")
    ranks = [HYPERPARAMETERS.index(s) for s in segments if s in HYPERPARAMETERS]
    if ranks:
        return 0, min(ranks), key
    return (2 if segments[0] == "monitor_config" else 1), 0, key


def differing_keys(configs: list[dict[str, Any]]) -> list[tuple[str, list[Any]]]:
    """Keys whose values are not the same in every config (absent counts as a value), hyperparameters first."""
    flats = [flatten(c) for c in configs]
    keys = {k for flat in flats for k in flat}
    rows = []
    for key in keys:
        values = [flat.get(key, MISSING) for flat in flats]
        if any(json.dumps(v, sort_keys=True, default=str) != json.dumps(values[0], sort_keys=True, default=str)
               for v in values[1:]):
            rows.append((key, values))
    return sorted(rows, key=lambda row: _rank(row[0]))


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
    _, throughput = run.series("throughput")
    finite = [v for v in throughput if math.isfinite(v)]
    return RunSummary(
        label=label,
        status=str(run.info.get("status", "unknown")),
        logged_steps=len(run.records),
        last_step=run.records[-1]["step"] if run.records else None,
        final_loss=final,
        best_loss=best,
        best_step=best_step,
        median_throughput=statistics.median(finite) if finite else None,
        alerts=len(run.alerts),
    )


@dataclass
class Comparison:
    """Runs side by side: their labels, the differing config keys and the summary numbers."""

    runs: list[RunData]
    labels: list[str]
    diff: list[tuple[str, list[Any]]]
    summaries: list[RunSummary]
    notes: list[str]

    def no_diff_text(self) -> str:
        """What to say when no key differs."""
        if all(run.config is None for run in self.runs):
            return "No run has a readable config.yaml: nothing to compare."
        return "The configs are identical."


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
            notes.append(f"{label}: no readable config.yaml; its keys count as absent")
        configs.append(run.config or {})
    summaries = [summarise(label, run) for label, run in zip(labels, runs, strict=True)]
    return Comparison(runs, labels, differing_keys(configs), summaries, notes)


def show_value(value: Any) -> str:
    """A config value as short text."""
    if value is MISSING or value == MISSING:
        return MISSING
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return str(value)


def summary_cells(summary: RunSummary) -> list[str]:
    """The summary row of one run as text cells (see SUMMARY_HEADERS)."""
    best = f"{fmt_number(summary.best_loss)} @ {summary.best_step}" if summary.best_loss is not None else "-"
    return [summary.label, summary.status, str(summary.logged_steps), str(summary.last_step or "-"),
            fmt_number(summary.final_loss), best, fmt_number(summary.median_throughput), str(summary.alerts)]


SUMMARY_HEADERS: tuple[str, ...] = ("run", "status", "logged", "last step", "final loss", "best loss @ step",
                                    "median tokens/s", "alerts")


def build_compare(comparison: Comparison) -> str:
    """The comparison page: legend, overlaid plots, differing keys and summaries."""
    runs = comparison.runs
    labelled = [RunData(r.path, {**r.info, "run_name": label}, r.config_text, r.config, r.records, [])
                for r, label in zip(runs, comparison.labels, strict=True)]
    panels = [panel(m, labelled, MAX_POINTS) for m in panel_metrics(labelled)]
    legend = "".join(f"<span><i style=\"background:{PALETTE[i % len(PALETTE)]}\"></i>{esc(label)}</span>"
                     for i, label in enumerate(comparison.labels))
    head = "".join(f"<th>{esc(label)}</th>" for label in comparison.labels)
    diff_rows = "".join(
        f"<tr><td><code>{esc(key)}</code></td>" + "".join(f"<td>{esc(show_value(v))}</td>" for v in values) + "</tr>"
        for key, values in comparison.diff
    )
    diff_table = (f"<table class=\"diff\"><tr><th>config key</th>{head}</tr>{diff_rows}</table>"
                  if comparison.diff else f"<p>{esc(comparison.no_diff_text())}</p>")
    sum_head = "".join(f"<th>{esc(h)}</th>" for h in SUMMARY_HEADERS)
    sum_rows = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in summary_cells(s)) + "</tr>"
                       for s in comparison.summaries)
    body = [
        f"<h1>Comparison of {len(runs)} runs</h1>",
        f"<div class=\"legend\">{legend}</div>",
    ]
    if comparison.notes:
        body.append("<div class=\"notes\">" + "<br>".join(esc(n) for n in comparison.notes) + "</div>")
    body += [
        f"<h2>Summary</h2><table class=\"summary\"><tr>{sum_head}</tr>{sum_rows}</table>",
        f"<h2>Config keys that differ ({len(comparison.diff)})</h2>", diff_table,
        "<h2>Metrics</h2>", plots_section(panels, "Alerts are marked in each run's own report.", alerts=False),
        f"<p class=\"hint\">Generated by msmon {esc(__version__)} on "
        f"{esc(datetime.now().astimezone().isoformat(timespec='seconds'))} from: "
        + ", ".join(esc(r.path) for r in runs) + "</p>",
    ]
    data = {"panels": panels, "alerts": alert_rows([])}
    return page("msmon compare: " + " vs ".join(comparison.labels), "\n".join(body), data)


def write_compare(comparison: Comparison, out: str | Path) -> Path:
    """Write the comparison page to ``out``."""
    return write_page(Path(out), build_compare(comparison), "compare.html")
