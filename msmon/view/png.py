"""PNG plots of one or more runs with matplotlib (Agg): one image per metric plus a stacked overview."""

from __future__ import annotations

import math
from pathlib import Path

from msmon.errors import MsmonError
from msmon.foreign import BackendClient
from msmon.util.numbers import as_number
from msmon.view.html import LABELS, PALETTE, panel_metrics, rollback_rows
from msmon.view.series import PLOT_METRICS, RunData


def _draw(ax: BackendClient, metric: str, runs: list[RunData], alerts: bool) -> None:
    for index, run in enumerate(runs):
        drawn = run.sketch(metric).draw()
        color = PALETTE[index % len(PALETTE)]
        ax.plot(drawn.x, drawn.y, color=color, linewidth=1.2, label=run.name,
                marker="o" if len(drawn.x) < 120 else None, markersize=2.5)
        for step, kind in drawn.nonfinite:
            ax.axvline(step, color="#b91c1c", linestyle=":", linewidth=1)
            top = kind != "-inf"
            ax.annotate({"nan": "NaN", "inf": "+Inf", "-inf": "-Inf"}[kind], (step, 1.0 if top else 0.0),
                        xycoords=("data", "axes fraction"), color="#b91c1c", fontsize=7,
                        va="top" if top else "bottom", ha="left", fontweight="bold")
    if alerts:
        for run in runs:
            for band in rollback_rows(run.info):  # the stretch trained again after a rollback
                ax.axvspan(band["step"], band["until"], color="#7c3aed", alpha=0.1, linewidth=0)
                ax.annotate(band["label"], (band["step"], 0.98), xycoords=("data", "axes fraction"), color="#7c3aed",
                            fontsize=6, va="top", ha="left")
            for number, alert in enumerate(run.alerts, start=1):
                at = as_number(alert.get("step"))
                if at is None or not math.isfinite(at):
                    continue
                color = "#dc2626" if alert.get("severity") == "critical" else "#d97706"
                ax.axvline(at, color=color, linestyle="--", linewidth=1)
                ax.annotate(f"#{number}", (at, 1.0), xycoords=("data", "axes fraction"), color=color,
                            fontsize=7, va="bottom", ha="center")
    ax.set_ylabel(LABELS.get(metric, metric))
    ax.grid(True, color="#e5e7eb")
    if len(runs) > 1:
        ax.legend(fontsize=7, loc="best")


def write_pngs(runs: list[RunData], out_dir: Path) -> list[Path]:
    """Write <metric>.png for each metric and overview.png (the four main metrics stacked on one step axis)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MsmonError("--png needs matplotlib", "pip install 'msmon[report]'") from None
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MsmonError(f"cannot create {out_dir}: {exc.strerror or exc}", "pass a writable --png directory") from None
    metrics = panel_metrics(runs)
    written: list[Path] = []
    for metric in metrics:
        fig, ax = plt.subplots(figsize=(10, 3.2), dpi=100)
        _draw(ax, metric, runs, alerts=len(runs) == 1)
        ax.set_xlabel("step")
        fig.tight_layout()
        path = out_dir / f"{metric}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    main = [m for m in PLOT_METRICS if m in metrics] or metrics[:4]
    if main:
        fig, axes = plt.subplots(len(main), 1, figsize=(10, 2.4 * len(main) + 0.6), dpi=100, sharex=True,
                                 squeeze=False)
        for ax, metric in zip(axes[:, 0], main, strict=True):
            _draw(ax, metric, runs, alerts=len(runs) == 1)
        axes[-1, 0].set_xlabel("step")
        fig.suptitle(" vs ".join(r.name for r in runs), fontsize=10)
        fig.tight_layout()
        path = out_dir / "overview.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written
