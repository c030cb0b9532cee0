"""`msmon report`: one self-contained HTML file (and optional PNGs) for a run directory."""

from __future__ import annotations

import json
import math
import shlex
from datetime import datetime
from pathlib import Path

from msmon import layout
from msmon.anomaly import rollbacks_of
from msmon.config.metrics import UPDATE_RATIO_PREFIX
from msmon.util.durations import format_duration
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import as_number, fmt_number
from msmon.view.band import drift_partings, run_band, with_bands
from msmon.view.heatmap import heatmap
from msmon.view.html import fmt_time, panel, panel_metrics, render, rollback_rows, write_page
from msmon.view.profiles import profile_views, window_marks
from msmon.view.series import PLOT_METRICS, RunData, load_run

META_ORDER: tuple[str, ...] = (
    "run_name", "project_name", "status", "start_time", "end_time", "last_step", "total_steps", "exit_code",
    "error", "alert_count", "dropped_records", "device_target", "device_count", "host", "pid", "command", "cwd",
    "config_path", "run_dir", "git_commit", "msmon_version", "mindspore_version", "mindformers_version",
    "python_version",
)


def _duration(info: JsonObject) -> str:
    try:
        start = datetime.fromisoformat(str(info["start_time"]))
        end = datetime.fromisoformat(str(info["end_time"]))
    except (KeyError, TypeError, ValueError):
        return ""
    return format_duration((end - start).total_seconds(), fine=True)


def metadata_rows(info: JsonObject) -> list[tuple[str, str, bool]]:
    """run.json as (key, text, shown as code) rows, the important keys first, the duration after the end time."""
    keys = [k for k in META_ORDER if k in info] + sorted(k for k in info if k not in META_ORDER)
    rows = []
    for key in keys:
        value = info[key]
        if key == "command" and isinstance(value, list):
            rows.append((key, shlex.join(str(v) for v in value), True))
        elif isinstance(value, dict | list):
            rows.append((key, json.dumps(value), True))
        else:
            rows.append((key, "-" if value is None else str(value), False))
    duration = _duration(info)
    if duration:
        rows.insert(min(5, len(rows)), ("duration", duration, False))
    return rows


def alert_rows(alerts: list[JsonObject]) -> list[JsonObject]:
    """Alerts numbered in step order, as the plotting script draws them."""
    out = []
    for number, alert in enumerate(alerts, start=1):
        step = as_number(alert.get("step"))
        out.append({
            "n": number,
            "step": int(step) if step is not None and math.isfinite(step) else None,
            "severity": str(alert.get("severity", "warning")),
            "detector": str(alert.get("detector", "")),
            "message": str(alert.get("message", "")),
        })
    return out


def alert_table_rows(alerts: list[JsonObject]) -> list[JsonObject]:
    """The alerts of a run as table rows (number, step, time, detector, severity, message, values, action, context
    file). The groups' details and the first mover are in the message."""
    rows = []
    for number, alert in enumerate(alerts, start=1):
        values = alert.get("values")
        shown = ", ".join(f"{k}={fmt_number(v, 5)}" for k, v in values.items()
                          if k not in ("groups", "first_mover")) if isinstance(values, dict) else ""
        rows.append({"n": number, "step": alert.get("step"), "time": fmt_time(alert.get("time")),
                     "detector": alert.get("detector"), "severity": alert.get("severity", ""),
                     "message": alert.get("message"), "values": shown, "action": alert.get("action"),
                     "context": str(alert.get("context_file") or "")})
    return rows


def summary_line(run: RunData) -> str:
    """Logged steps, step range, final and best loss of a run."""
    records = run.records
    parts = [f"{records.logged} logged steps"]
    if records.logged:
        parts.append(f"steps {records.first_step}..{records.last_step}")
    final, best, best_step = loss_summary(run)
    if final is not None:
        parts.append(f"final loss {fmt_number(final, 5)}")
    if best is not None:
        parts.append(f"best loss {fmt_number(best, 5)} at step {best_step}")
    made = rollbacks_of(run.info)
    if made:
        skipped = sum(r.skipped_steps for r in made)
        parts.append(f"{len(made)} rollback{'s' if len(made) > 1 else ''} (the data of {skipped} steps skipped)")
    return ", ".join(parts)


def loss_summary(run: RunData) -> tuple[float | None, float | None, int | None]:
    """(final loss, best finite loss, step of the best loss)."""
    loss = run.sketch("loss")
    low = loss.low()
    return (loss.last[1] if loss.last else None, low[1] if low else None, low[0] if low else None)


def build_report(run: RunData) -> str:
    """The report page of one run."""
    metrics = panel_metrics([run])
    band, band_notes = run_band(run)
    panels = with_bands([panel(m, [run]) for m in metrics], band)
    missing = [m for m in PLOT_METRICS if m not in metrics]
    drawn = max((len(s["x"]) for p in panels for s in p["series"]), default=0)
    total = run.records.logged
    note = (f"{total} logged steps drawn as at most {drawn} points per plot (first, min, max and last of each "
            "bucket kept, so spikes stay visible; every NaN/Inf bucket marked, every alert drawn)."
            if drawn < total else "")
    groups, updates = heatmap(run), heatmap(run, prefix=UPDATE_RATIO_PREFIX)
    profiles = profile_views(run.path)
    data = {"panels": panels, "alerts": alert_rows(run.alerts), "rollbacks": rollback_rows(run.info),
            "heatmap": groups, "update_heatmap": updates, "partings": drift_partings(run.alerts),
            "profiles": window_marks(profiles)}
    return render(
        "report.html.j2", f"msmon report: {run.name}", data, panels, alert_markers=True, plot_note=note, run=run,
        groups=groups["groups"] if groups else [], update_groups=updates["groups"] if updates else [],
        status=str(run.info.get("status", "unknown")), project=run.info.get("project_name", ""),
        summary=summary_line(run),
        notes=[*run.notes, *band_notes, *(f"{m} was not recorded in this run" for m in missing)],
        alerts=alert_table_rows(run.alerts), metadata=metadata_rows(run.info), profiles=profiles,
    )


def write_report(
    run_path: str | Path, out: str | Path | None = None, png_dir: str | Path | None = None
) -> tuple[Path, list[Path]]:
    """Write the HTML report of a run (default: <run>/report.html) and, when asked, its PNG plots."""
    run = load_run(run_path)
    target = Path(out) if out is not None else run.path / layout.REPORT
    write_page(target, build_report(run), "report.html")
    pngs: list[Path] = []
    if png_dir is not None:
        from msmon.view.png import write_pngs

        pngs = write_pngs([run], Path(png_dir))
    return target, pngs
