"""The band a run must stay in: its reference runs' curves, each smoothed, their centre and their spread by step.

Positive metrics (loss, grad norm) are compared as logs: a band a fixed fraction wide at every scale. The spread is
what the references themselves disagree by (runs of different seeds), widened to the largest disagreement nearby so
that a moment where two curves happen to cross is no narrow point, never narrower than a multiple of the references'
own noise (two seeds that happen to agree for a long stretch say little about a third) nor than the tolerance.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from msmon.config.health import ReferenceDriftSettings
from msmon.errors import MsmonError
from msmon.reference.curve import ReferenceCurve
from msmon.util.numbers import MAD_TO_SIGMA

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Position:
    """Where a run's level lies against the band at one step (all in the metric's own units)."""

    level: float
    center: float
    low: float
    high: float

    @property
    def outside(self) -> bool:
        return not self.low <= self.level <= self.high

    def deviation(self) -> float:
        """The level against the centre, as a fraction (+0.25: 25% above)."""
        return self.level / self.center - 1.0


@dataclass(frozen=True)
class MetricBand:
    """One metric's band on the references' common steps: centre and half-width of the smoothed logs."""

    metric: str
    steps: array  # array('d'): read one element at a time, per record (numpy's scalars cost 10x more there)
    center: array
    half_width: array

    def at(self, step: float, level: float) -> Position | None:
        """``level`` (the run's smoothed value, > 0) against the band at ``step`` (the centre linear between the
        grid's steps, the band spanning both ends' bands); None outside the references."""
        steps = self.steps
        if not steps[0] <= step <= steps[-1]:
            return None
        right = bisect_left(steps, step)
        left = max(right - 1, 0)
        x0, x1 = steps[left], steps[right]
        weight = (step - x0) / (x1 - x0) if x1 > x0 else 1.0
        center = self.center[left] + weight * (self.center[right] - self.center[left])
        # between two steps of the grid the references' curves may lie anywhere from one end's band to the other's
        # (a warm-up's peak between the logs of references logged every 10 steps): the band spans both
        ends = (right,) if step == x1 else (left, right)
        low = min(self.center[i] - self.half_width[i] for i in ends)
        high = max(self.center[i] + self.half_width[i] for i in ends)
        return Position(level, math.exp(center), math.exp(low), math.exp(high))


@dataclass(frozen=True)
class ReferenceBand:
    """The band of every compared metric, and how this run's steps map onto the references' (``step_scale``:
    reference steps per run step; 1 when aligned by step)."""

    sources: tuple[str, ...]
    bands: Mapping[str, MetricBand]
    step_scale: float = 1.0

    def at(self, metric: str, step: float, level: float) -> Position | None:
        band = self.bands.get(metric)
        return band.at(step * self.step_scale, level) if band is not None else None

    def describe(self) -> str:
        """``2 reference runs (a, b)``: for messages."""
        count = len(self.sources)
        return f"{count} reference run{'s' if count != 1 else ''} ({', '.join(self.sources)})"


def step_scale(settings: ReferenceDriftSettings, curves: Sequence[ReferenceCurve], run_batch: int | None) -> float:
    """Reference steps per run step: by consumed samples when asked (or, with ``auto``, when the global batch sizes
    are known and differ), else by step."""
    batches = {c.global_batch_size for c in curves}
    ref_batch = next(iter(batches)) if len(batches) == 1 else None
    if settings.align == "step":
        return 1.0
    if ref_batch is None or run_batch is None:
        if settings.align == "samples":
            raise MsmonError("health.reference_drift.align is samples, but the global batch size of the run or of "
                             "a reference is unknown (or the references differ)",
                             "set align: step, or compare runs whose configs state their batch sizes")
        return 1.0
    return run_batch / ref_batch


def smoothed_logs(steps: np.ndarray, values: np.ndarray, smooth_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """The finite positive values' logs, each the median of the logs over the last ``smooth_steps`` steps (the
    window counted in logs at the curve's typical interval), placed at the median of the window's steps: a trailing
    median lags a trend by half its window, so a curve logged every step and one logged every 10 steps (one log a
    window, no lag) agree only when each value stands at its window's centre (as the run's level does)."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    keep = np.isfinite(values) & (values > 0)
    steps, logs = steps[keep], np.log(values[keep])
    if len(steps) == 0:
        return steps, logs
    interval = float(np.median(np.diff(steps))) if len(steps) > 1 else 1.0
    width = max(1, min(len(logs), round(smooth_steps / max(interval, 1.0))))

    def trailing_median(series: np.ndarray) -> np.ndarray:
        padded = np.concatenate([np.full(width - 1, np.nan), series])
        return np.nanmedian(sliding_window_view(padded, width), axis=1)

    return trailing_median(steps.astype(float)), trailing_median(logs)


def step_noise(values: np.ndarray) -> float:
    """The scatter of one log of a positive metric (the standard deviation of its log), robustly from the second
    differences of its finite positive values' logs (6 x the variance of white noise; a straight or slowly bending
    trend, such as a learning-rate schedule, adds nothing): 0 with fewer than 3 values."""
    import numpy as np

    logs = np.log(values[np.isfinite(values) & (values > 0)])
    if len(logs) < 3:
        return 0.0
    return float(MAD_TO_SIGMA * np.median(np.abs(np.diff(logs, n=2))) / math.sqrt(6))


def pooled_noise(series: Sequence[np.ndarray]) -> float:
    """The references' step noise pooled, each weighed by its count of logs: a reference logged every 10 steps has a
    tenth of the logs, and its second differences span 10 times the steps, so the curve's own bends (the loss's early
    fall) count in them as noise; it should not outweigh a reference logged every step."""
    import numpy as np

    counts = [int(np.count_nonzero(np.isfinite(v) & (v > 0))) for v in series]
    if sum(counts) == 0:
        return 0.0
    return math.sqrt(sum(n * step_noise(v) ** 2 for n, v in zip(counts, series, strict=True)) / sum(counts))


def build_band(curves: Sequence[ReferenceCurve], settings: ReferenceDriftSettings,
               run_batch: int | None = None) -> ReferenceBand:
    """The band of ``settings.metrics`` that every reference has; MsmonError when they share none."""
    import numpy as np
    from scipy.ndimage import maximum_filter1d

    bands: dict[str, MetricBand] = {}
    for metric in settings.metrics:
        if not all(metric in curve.series for curve in curves):
            continue
        smoothed = [smoothed_logs(np.asarray(c.steps, dtype=float), np.asarray(c.series[metric], dtype=float),
                                  settings.smooth_steps) for c in curves]
        if any(len(steps) == 0 for steps, _ in smoothed):
            continue
        first, last = max(s[0] for s, _ in smoothed), min(s[-1] for s, _ in smoothed)
        every = np.unique(np.concatenate([steps for steps, _ in smoothed]))  # a sparse reference's bends show
        grid = every[(every >= first) & (every <= last)]  # only at the denser references' steps
        if len(grid) == 0:
            continue
        logs = np.stack([np.interp(grid, steps, values) for steps, values in smoothed])
        half_range = (logs.max(axis=0) - logs.min(axis=0)) / 2
        interval = float(np.median(np.diff(grid))) if len(grid) > 1 else 1.0
        reach = int(round(settings.span_steps / max(interval, 1.0)))
        spread = maximum_filter1d(half_range, size=2 * reach + 1, mode="nearest")
        half = np.maximum(settings.spread_factor * spread, math.log1p(settings.tolerance))
        if len(curves) > 1:
            half = np.maximum(half, settings.noise_factor * pooled_noise(
                [np.asarray(c.series[metric], dtype=float) for c in curves]))
        bands[metric] = MetricBand(metric, array("d", grid.tolist()), array("d", logs.mean(axis=0).tolist()),
                                   array("d", half.tolist()))
    if not bands:
        names = ", ".join(str(c.source) for c in curves)
        raise MsmonError(f"the reference runs ({names}) share none of health.reference_drift.metrics "
                         f"({', '.join(settings.metrics)}) over a common range of steps",
                         "name references that log these metrics, or set health.reference_drift.metrics")
    return ReferenceBand(tuple(c.source.name for c in curves), bands, step_scale(settings, curves, run_batch))


def parse_tags(pairs: Sequence[str]) -> dict[str, str]:
    """``monitor_config.reference.tags`` (``metric=tag`` pairs) as a mapping; MsmonError for a pair without ``=``."""
    tags: dict[str, str] = {}
    for pair in pairs:
        metric, sep, tag = pair.partition("=")
        if not sep or not metric.strip() or not tag.strip():
            raise MsmonError(f"monitor_config.reference.tags: {pair!r} is not metric=tag",
                             "write e.g. loss=lm loss (msmon's metric name, then the tag or column)")
        tags[metric.strip()] = tag.strip()
    return tags


def reference_band(runs: Sequence[str], tags: Sequence[str], settings: ReferenceDriftSettings,
                   run_batch: int | None = None) -> ReferenceBand | None:
    """The band of the named references (None when there are none): each loaded, then ``build_band``."""
    from msmon.reference.load import load_reference

    if not runs:
        return None
    names = parse_tags(tags)
    return build_band([load_reference(Path(run), names) for run in runs], settings, run_batch)
