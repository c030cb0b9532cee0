"""The reference band as the report and compare pages draw it: each metric's edges on the run's steps (the references'
smoothed spread, the band ``health.reference_drift`` judges the run against) and the steps where the run parts."""

from __future__ import annotations

import math
from collections.abc import Mapping

from msmon.config.coerce import build
from msmon.config.health import ReferenceDriftSettings
from msmon.errors import MsmonError
from msmon.reference.band import ReferenceBand, reference_band
from msmon.reference.sources.run_dir import run_global_batch
from msmon.util.jsonfiles import JsonObject
from msmon.view.series import RunData

#: Points of a band's edges drawn per metric (the band is smooth: every k-th grid step keeps its shape).
MAX_BAND_POINTS = 1000
DRIFT_DETECTOR = "reference_drift"


def band_overlays(band: ReferenceBand) -> dict[str, JsonObject]:
    """metric -> ``{x, low, high, label}``: the band's edges at the run's steps (the references' steps divided by the
    band's step scale), at most ``MAX_BAND_POINTS`` of them."""
    overlays = {}
    for metric, edges in band.bands.items():
        stride = max(1, math.ceil(len(edges.steps) / MAX_BAND_POINTS))
        picked = [*range(0, len(edges.steps), stride)]
        if picked[-1] != len(edges.steps) - 1:
            picked.append(len(edges.steps) - 1)
        overlays[metric] = {
            "x": [edges.steps[i] / band.step_scale for i in picked],
            "low": [math.exp(edges.center[i] - edges.half_width[i]) for i in picked],
            "high": [math.exp(edges.center[i] + edges.half_width[i]) for i in picked],
            "label": f"band of {band.describe()}",
        }
    return overlays


def with_bands(panels: list[JsonObject], band: ReferenceBand | None) -> list[JsonObject]:
    """The plot panels, each metric the band covers carrying its edges (key ``band``)."""
    overlays = band_overlays(band) if band is not None else {}
    return [{**p, "band": overlays[p["metric"]]} if p["metric"] in overlays else p for p in panels]


def run_band(run: RunData) -> tuple[ReferenceBand | None, list[str]]:
    """The band of the references the run was compared with live (its ``monitor_config.reference``, judged with its
    own ``health.reference_drift`` settings), None when it named none; a note when they cannot be loaded now."""
    monitor = run.monitor or {}
    own = monitor.get("reference")
    runs = [str(r) for r in (own.get("runs") or [])] if isinstance(own, Mapping) else []
    if not runs:
        return None, []
    tags = [str(t) for t in (own.get("tags") or [])] if isinstance(own, Mapping) else []
    health = monitor.get("health")
    section = health.get(DRIFT_DETECTOR) if isinstance(health, Mapping) else None
    settings, _ = build(ReferenceDriftSettings, section if isinstance(section, Mapping) else {},
                        f"monitor_config.health.{DRIFT_DETECTOR}")
    try:
        return reference_band(runs, tags, settings, run_global_batch(run.path)), []
    except MsmonError as exc:
        return None, [f"the reference band is not drawn: {exc.message}"]


def drift_partings(alerts: list[JsonObject]) -> list[JsonObject]:
    """The steps where the run left its references' band, as the plotting script marks them: each
    ``reference_drift`` alert's first parted step and its metric."""
    partings = []
    for alert in alerts:
        values = alert.get("values")
        if alert.get("detector") != DRIFT_DETECTOR or not isinstance(values, Mapping):
            continue
        step = alert.get("onset_step", alert.get("step"))
        metric = str(values.get("metric", "?"))
        if isinstance(step, int):
            partings.append({"step": step, "metric": metric, "label": f"leaves the band: {metric}"})
    return partings
