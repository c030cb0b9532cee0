"""Self-contained HTML pages: inlined CSS, plotting script and JSON data (nothing fetched at view time)."""

from __future__ import annotations

import html
import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

from msmon.errors import MsmonError
from msmon.util.atomic import atomic_write_text
from msmon.view.series import PLOT_METRICS, DrawSeries, RunData, downsample

ASSETS = Path(__file__).parent / "assets"
PALETTE: tuple[str, ...] = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#ca8a04")
SKIP_METRICS: frozenset[str] = frozenset({"global_step", "epoch", "rank", "time", "step"})
LABELS: dict[str, str] = {"throughput": "throughput (tokens/s)", "step_time_ms": "step_time (ms)"}


def esc(value: Any) -> str:
    """HTML-escape any value's text."""
    return html.escape("" if value is None else str(value))


def fmt_number(value: Any) -> str:
    """A short human form of a metric value (NaN/Inf spelled out)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "-" if value is None else str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    if isinstance(value, int):
        return str(value)
    magnitude = abs(value)
    if magnitude and (magnitude < 1e-3 or magnitude >= 1e6):
        return f"{value:.3e}"
    return f"{value:.5g}"


def fmt_time(value: Any) -> str:
    """A unix time as local ISO text; other values as given."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return datetime.fromtimestamp(value).astimezone().isoformat(timespec="seconds")
    return esc(value) if value is not None else "-"


def panel_metrics(runs: list[RunData]) -> list[str]:
    """Metrics to draw for these runs: loss, grad_norm, learning_rate, throughput first, then the rest."""
    seen: dict[str, None] = {}
    for run in runs:
        for metric in run.metrics():
            if metric not in SKIP_METRICS:
                seen.setdefault(metric, None)
    return list(seen)


def panel(metric: str, runs: list[RunData], max_points: int) -> dict[str, Any]:
    """One plot panel: the metric's series of every run (downsampled for drawing)."""
    series = []
    for index, run in enumerate(runs):
        drawn: DrawSeries = downsample(*run.series(metric), max_points=max_points)
        if drawn.total:
            series.append({"name": run.name, "color": PALETTE[index % len(PALETTE)], **drawn.to_json()})
    group = "main" if metric in PLOT_METRICS else "more"
    return {"metric": metric, "label": LABELS.get(metric, metric), "series": series, "group": group}


def script_json(data: Any) -> str:
    """JSON safe inside a <script> element (no NaN: non-finite points travel as markers)."""
    text = json.dumps(data, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page(title: str, body: str, data: dict[str, Any]) -> str:
    """A complete HTML document with the stylesheet, the data and the plotting script inlined."""
    try:
        css = (ASSETS / "style.css").read_text(encoding="utf-8")
        js = (ASSETS / "plot.js").read_text(encoding="utf-8").replace("</", "<\\/")
    except OSError as exc:
        raise MsmonError(f"msmon's page assets are missing: {exc.filename}",
                         "reinstall msmon (msmon/view/assets/ must be packaged)") from None
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<link rel=\"icon\" href=\"data:,\">\n<title>{esc(title)}</title>\n<style>\n{css}</style>\n</head>\n"
        f"<body>\n<main>\n{body}\n</main>\n<div id=\"msmon-tip\"></div>\n"
        f"<script id=\"msmon-data\" type=\"application/json\">{script_json(data)}</script>\n"
        f"<script>\n{js}</script>\n</body>\n</html>\n"
    )


def plots_section(panels: list[dict[str, Any]], note: str = "", alerts: bool = True) -> str:
    """The containers the plotting script fills (main metrics, then the others folded), with a usage hint."""
    hint = "Drag across a plot to zoom all plots, double-click to reset" + (
        "; hover an alert marker for its message." if alerts else ".")
    extra = [p["label"] for p in panels if p["group"] == "more"]
    folded = (f"<details><summary>More metrics: {esc(', '.join(extra))}</summary><div id=\"msmon-plots-more\">"
              "</div></details>" if extra else "")
    return f"<p class=\"hint\">{esc(hint)} {esc(note)}</p>\n<div id=\"msmon-plots\"></div>{folded}"


def write_page(target: Path, text: str, example: str) -> Path:
    """Write an HTML page atomically to ``target`` (a file in an existing directory), world-readable."""
    if target.is_dir():
        raise MsmonError(f"--out is a directory: {target}", f"pass a file name such as {example}")
    if not target.parent.is_dir():
        raise MsmonError(f"directory of --out does not exist: {target.parent}", "create it first")
    atomic_write_text(target, text, fsync=False)
    target.chmod(0o644)
    return target
