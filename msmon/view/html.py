"""Self-contained HTML pages rendered from Jinja2 templates with autoescape: inlined CSS, plotting script and
JSON data (nothing fetched at view time); a run name or an alert message is always text, never markup."""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

from msmon import __version__
from msmon.anomaly import rollbacks_of
from msmon.config.metrics import is_expert_tokens, is_group_key
from msmon.errors import MsmonError
from msmon.util.atomic import atomic_write_text
from msmon.util.jsonfiles import JsonObject, JsonValue
from msmon.util.numbers import as_number
from msmon.view.series import PLOT_METRICS, RunData

ASSETS = Path(__file__).parent / "assets"
TEMPLATES = Path(__file__).parent / "templates"
PALETTE: tuple[str, ...] = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#ca8a04")
SKIP_METRICS: frozenset[str] = frozenset({"global_step", "epoch", "rank", "time", "step", "model_flops"})
LABELS: dict[str, str] = {"throughput": "throughput (tokens/s)", "step_time_ms": "step_time (ms)",
                          "tflops_per_device": "TFLOPS per device", "mfu": "MFU (model FLOPs utilisation)"}


def fmt_time(value: JsonValue) -> str:
    """A unix time as local ISO text; other values as given."""
    number = as_number(value)
    if number is not None and math.isfinite(number):
        return datetime.fromtimestamp(number).astimezone().isoformat(timespec="seconds")
    return "-" if value is None else str(value)


def now_text() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def panel_metrics(runs: list[RunData]) -> list[str]:
    """Metrics to draw for these runs: loss, grad_norm, learning_rate, throughput first, then the rest (the
    per-group series are the report's heatmaps or its table, not one plot each; of the MoE routing, each layer's
    summaries, not a plot per expert)."""
    seen: dict[str, None] = {}
    for run in runs:
        for metric in run.metrics():
            if metric not in SKIP_METRICS and not is_group_key(metric) and not is_expert_tokens(metric):
                seen.setdefault(metric, None)
    return list(seen)


def panel(metric: str, runs: list[RunData]) -> JsonObject:
    """One plot panel: the metric's series of every run (downsampled for drawing)."""
    series = []
    for index, run in enumerate(runs):
        drawn = run.sketch(metric).draw()
        if drawn.total:
            series.append({"name": run.name, "color": PALETTE[index % len(PALETTE)], **drawn.to_json()})
    group = "main" if metric in PLOT_METRICS else "more"
    return {"metric": metric, "label": LABELS.get(metric, metric), "series": series, "group": group}


def rollback_rows(info: JsonObject) -> list[JsonObject]:
    """The run's rollbacks as the plotting script draws them: the stretch from the checkpoint's step to the alert,
    trained again on other data, with its label."""
    return [{"step": r.checkpoint_step, "until": r.alert_step, "label": f"rollback: {r.describe()}"}
            for r in rollbacks_of(info)]


def script_json(data: object) -> str:
    """JSON safe inside a <script> element (no NaN: non-finite points travel as markers)."""
    text = json.dumps(data, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render(template: str, title: str, data: JsonObject, panels: list[JsonObject], **context: object) -> str:
    """A complete page from ``template`` (autoescaped), with the stylesheet, the data and the script inlined."""
    import jinja2

    try:
        css = (ASSETS / "style.css").read_text(encoding="utf-8")
        scripts = [(ASSETS / name).read_text(encoding="utf-8") for name in ("plot.js", "heatmap.js")]
        js = "\n".join(scripts).replace("</", "<\\/")
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                                 undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
        page = env.get_template(template)
    except (OSError, jinja2.TemplateNotFound) as exc:
        raise MsmonError(f"msmon's page assets are missing: {exc}",
                         "reinstall msmon (msmon/view/assets/ and templates/ must be packaged)") from None
    more = [p["label"] for p in panels if p["group"] == "more"]
    return page.render(title=title, css=css, js=js, data_json=script_json(data), more_metrics=more,
                       version=__version__, generated=now_text(), **context)


def write_page(target: Path, text: str, example: str) -> Path:
    """Write an HTML page atomically to ``target`` (a file in an existing directory), world-readable."""
    if target.is_dir():
        raise MsmonError(f"--out is a directory: {target}", f"pass a file name such as {example}")
    if not target.parent.is_dir():
        raise MsmonError(f"directory of --out does not exist: {target.parent}", "create it first")
    atomic_write_text(target, text, fsync=False)
    target.chmod(0o644)
    return target
