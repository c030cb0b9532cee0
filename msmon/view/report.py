"""`msmon report`: one self-contained HTML file (and optional PNGs) for a run directory."""

from __future__ import annotations

import json
import math
import shlex
from datetime import datetime
from pathlib import Path
from typing import Any

from msmon import __version__
from msmon.view.html import esc, fmt_number, fmt_time, page, panel, panel_metrics, plots_section, write_page
from msmon.view.series import PLOT_METRICS, RunData, load_run, to_float

MAX_POINTS = 4000
META_ORDER: tuple[str, ...] = (
    "run_name", "project_name", "status", "start_time", "end_time", "last_step", "total_steps", "exit_code",
    "error", "alert_count", "dropped_records", "device_target", "device_count", "host", "pid", "command", "cwd",
    "config_path", "run_dir", "git_commit", "msmon_version", "mindspore_version", "mindformers_version",
    "python_version",
)


def _duration(info: dict[str, Any]) -> str:
    try:
        start = datetime.fromisoformat(str(info["start_time"]))
        end = datetime.fromisoformat(str(info["end_time"]))
    except (KeyError, TypeError, ValueError):
        return ""
    seconds = int((end - start).total_seconds())
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m {seconds % 60:02d}s"


def _meta_value(key: str, value: Any) -> str:
    if key == "command" and isinstance(value, list):
        return f"<code>{esc(shlex.join(str(v) for v in value))}</code>"
    if isinstance(value, dict | list):
        return f"<code>{esc(json.dumps(value))}</code>"
    return esc("-" if value is None else value)


def metadata_table(info: dict[str, Any]) -> str:
    """run.json as a two-column table, the important keys first."""
    keys = [k for k in META_ORDER if k in info] + sorted(k for k in info if k not in META_ORDER)
    rows = [f"<tr><th>{esc(k)}</th><td>{_meta_value(k, info[k])}</td></tr>" for k in keys]
    duration = _duration(info)
    if duration:
        rows.insert(min(5, len(rows)), f"<tr><th>duration</th><td>{esc(duration)}</td></tr>")
    return "<table class=\"meta\">" + "".join(rows) + "</table>" if rows else "<p>run.json is missing.</p>"


def alert_rows(alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Alerts numbered in step order, as the plotting script draws them."""
    out = []
    for number, alert in enumerate(alerts, start=1):
        step = to_float(alert.get("step"))
        out.append({
            "n": number,
            "step": int(step) if step is not None and math.isfinite(step) else None,
            "severity": str(alert.get("severity", "warning")),
            "detector": str(alert.get("detector", "")),
            "message": str(alert.get("message", "")),
        })
    return out


def alerts_table(alerts: list[dict[str, Any]]) -> str:
    """The alerts of a run as a table (time, step, detector, severity, message, values, action)."""
    if not alerts:
        return "<p>No alerts.</p>"
    head = "<tr><th>#</th><th>step</th><th>time</th><th>detector</th><th>severity</th><th>message</th>" \
           "<th>values</th><th>action</th></tr>"
    rows = []
    for number, alert in enumerate(alerts, start=1):
        values = alert.get("values")
        shown = ", ".join(f"{k}={fmt_number(v)}" for k, v in values.items()) if isinstance(values, dict) else ""
        severity = esc(alert.get("severity", ""))
        rows.append(
            f"<tr class=\"{severity}\"><td>{number}</td><td class=\"num\">{esc(alert.get('step'))}</td>"
            f"<td>{fmt_time(alert.get('time'))}</td><td>{esc(alert.get('detector'))}</td>"
            f"<td class=\"sev\">{severity}</td><td>{esc(alert.get('message'))}</td>"
            f"<td><code>{esc(shown)}</code></td><td>{esc(alert.get('action'))}</td></tr>"
        )
    return f"<table class=\"alerts\">{head}{''.join(rows)}</table>"


def summary_line(run: RunData) -> str:
    """Logged steps, step range, final and best loss of a run."""
    steps = [r["step"] for r in run.records]
    parts = [f"{len(steps)} logged steps"]
    if steps:
        parts.append(f"steps {steps[0]}..{steps[-1]}")
    final, best, best_step = loss_summary(run)
    if final is not None:
        parts.append(f"final loss {fmt_number(final)}")
    if best is not None:
        parts.append(f"best loss {fmt_number(best)} at step {best_step}")
    return ", ".join(parts)


def loss_summary(run: RunData) -> tuple[float | None, float | None, int | None]:
    """(final loss, best finite loss, step of the best loss)."""
    steps, values = run.series("loss")
    final = values[-1] if values else None
    finite = [(v, s) for s, v in zip(steps, values, strict=True) if math.isfinite(v)]
    if not finite:
        return final, None, None
    best, best_step = min(finite)
    return final, best, best_step


def build_report(run: RunData, max_points: int = MAX_POINTS) -> str:
    """The report page of one run."""
    metrics = panel_metrics([run])
    panels = [panel(m, [run], max_points) for m in metrics]
    missing = [m for m in PLOT_METRICS if m not in metrics]
    notes = list(run.notes) + [f"{m} was not recorded in this run" for m in missing]
    drawn = max((len(s["x"]) for p in panels for s in p["series"]), default=0)
    total = len(run.records)
    ds_note = (f"{total} logged steps drawn as at most {drawn} points per plot "
               "(first, min, max and last of each bucket kept, so spikes stay visible)." if drawn < total else "")
    status = str(run.info.get("status", "unknown"))
    body = [
        f"<h1>{esc(run.name)} <span class=\"badge {esc(status)}\">{esc(status)}</span></h1>",
        f"<div class=\"sub\">{esc(run.info.get('project_name', ''))} &middot; {esc(summary_line(run))}</div>",
    ]
    if notes:
        body.append("<div class=\"notes\">" + "<br>".join(esc(n) for n in notes) + "</div>")
    body += [
        "<h2>Metrics</h2>", plots_section(panels, ds_note),
        f"<h2>Alerts ({len(run.alerts)})</h2>", alerts_table(run.alerts),
        "<h2>Run</h2>", metadata_table(run.info),
        "<h2>Config snapshot (config.yaml)</h2>",
        (f"<p>Command-line overrides: <code>{esc(' '.join(run.overrides))}</code></p>" if run.overrides else ""),
        f"<pre>{esc(run.config_text)}</pre>" if run.config_text is not None else "<p>config.yaml is missing.</p>",
        f"<p class=\"hint\">Generated by msmon {esc(__version__)} from {esc(run.path)} "
        f"on {esc(datetime.now().astimezone().isoformat(timespec='seconds'))}.</p>",
    ]
    data = {"panels": panels, "alerts": alert_rows(run.alerts)}
    return page(f"msmon report: {run.name}", "\n".join(body), data)


def write_report(
    run_path: str | Path, out: str | Path | None = None, png_dir: str | Path | None = None
) -> tuple[Path, list[Path]]:
    """Write the HTML report of a run (default: <run>/report.html) and, when asked, its PNG plots."""
    run = load_run(run_path)
    target = Path(out) if out is not None else run.path / "report.html"
    write_page(target, build_report(run), "report.html")
    pngs: list[Path] = []
    if png_dir is not None:
        from msmon.view.png import write_pngs

        pngs = write_pngs([run], Path(png_dir))
    return target, pngs
