"""Grad-norm explosion: sustained exponential growth against the run's own low, or an absolute cap."""

from __future__ import annotations

import math
import statistics
from itertools import islice

from msmon.config.health import GradExplosionSettings
from msmon.config.schedule import Schedule
from msmon.health.alert import Signal
from msmon.health.detectors.base import metric
from msmon.health.detectors.log_window import LogWindow, median_of_sorted
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import fmt_number

LEVEL_LOGS = 5  # logs whose median is the current level of the robust path


def theil_sen(points: list[tuple[int, float]]) -> float:
    """The median of the pairwise slopes: a trend that one outlier cannot fake or hide."""
    slopes = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(points) for x2, y2 in points[i + 1 :] if x2 != x1]
    return statistics.median(slopes) if slopes else 0.0


class GradExplosionDetector:
    """Fires when log(grad_norm) grows faster than ``growth_per_step`` with a significant fit and the
    value is ``ratio`` x above the lowest rolling median seen since the warm-up, on ``patience``
    consecutive logs: the growth that precedes a loss blow-up while the loss still looks fine. Also
    fires on ``absolute_threshold``.

    Heavy-tailed noise (one log 5x its neighbours) can defeat the least-squares significance, so a
    second, robust path also counts: the median of the last 5 logs above ``level_ratio`` x the low
    with an upward Theil-Sen trend of at least ``growth_per_step``.

    When the record has ``grad_norm_mean`` (the callback's mean over the steps since the previous
    log), that is the input instead of the logging step's own value, and ``grad_norm_max`` feeds the
    absolute threshold; records without them (older files) are judged on ``grad_norm`` as before.

    Its baseline forms only ``settle_steps`` after the schedule's LR warm-up (grad norms legitimately
    rise early in a run) and it fits only once a full window lies after that point.
    """

    name = "grad_explosion"

    def __init__(
        self, settings: GradExplosionSettings, schedule: Schedule | None = None, absolute_threshold: float | None = None
    ) -> None:
        self.settings = settings
        self.schedule = schedule or Schedule()
        self.absolute_threshold = absolute_threshold
        self._window = LogWindow()
        self._low = math.inf
        self._low_step = 0  # the step whose window set the low: "since step N" in the alert
        self._growing = False
        self._streak = 0
        self._over_cap = False
        self._previous: int | None = None  # the step of the record before: a value over the cap began after it

    def observe(self, record: JsonObject) -> Signal | None:
        own, mean = metric(record, "grad_norm"), metric(record, "grad_norm_mean")
        gn = own if mean is None else mean  # the interval mean: 10x the information of one step at interval 10
        step = record.get("step")
        if gn is None or not math.isfinite(gn) or gn <= 0 or not isinstance(step, int):
            return None
        s = self.settings
        previous, self._previous = self._previous, step
        cap = None if self.absolute_threshold is None else self._cap(record, own, gn, previous, step)
        start = (self.schedule.warmup_end or 0) + s.settle_steps
        if step <= start:
            return cap
        window = self._window
        window.append(step, math.log(gn))
        while len(window) > s.min_points and window.points[0][0] < step - s.window_steps:
            window.popleft()
        if len(window) < s.min_points or step - start < s.window_steps:
            return cap
        rolling = math.exp(window.median())
        if rolling < self._low:
            self._low, self._low_step = rolling, step
        ratio = gn / self._low
        level = math.exp(median_of_sorted(sorted([y for _, y in islice(reversed(window.points), LEVEL_LOGS)])))
        if ratio < s.ratio and level < s.level_ratio * self._low:  # neither path below can find growth: no fit
            self._streak, self._growing = 0, False
            return cap
        slope, t = window.fit()
        growing = (slope >= s.growth_per_step and t >= s.t_stat and ratio >= s.ratio) or (
            level >= s.level_ratio * self._low and theil_sen(list(window.points)) >= s.growth_per_step
        )
        self._streak = self._streak + 1 if growing else 0
        if not growing:
            if slope < s.growth_per_step / 2 or ratio < s.ratio:
                self._growing = False
            return cap
        if self._growing or self._streak < s.patience:
            return cap
        self._growing = True
        first = math.exp(window.points[0][1])
        span = step - window.points[0][0]
        label = "grad_norm" if mean is None else "grad_norm (interval mean)"
        return Signal(
            "warning",
            f"{label} is growing {100 * (math.exp(slope) - 1):.2g}%/step over the last {span} steps "
            f"({fmt_number(first)} -> {fmt_number(gn)}, {ratio:.2g}x its low {fmt_number(self._low)}); "
            "an explosion builds like this before the loss shows it",
            {"grad_norm": own, **({} if mean is None else {"grad_norm_mean": mean}),
             "growth_per_step": math.exp(slope) - 1, "t_stat": t, "low": self._low, "low_step": self._low_step,
             "ratio": ratio, "window_steps": span, "loss": metric(record, "loss")},
            onset_step=window.points[0][0],  # the growth is fitted from there
        )

    def _cap(self, record: JsonObject, own: float | None, gn: float, previous: int | None,
             step: int) -> Signal | None:
        """The absolute threshold's signal, once per excursion above it: any step of the interval above it counts
        (``grad_norm_max``), else the logging step's own grad_norm."""
        limit = self.absolute_threshold
        peak = metric(record, "grad_norm_max")
        if peak is not None and math.isfinite(peak):
            value, label = peak, "the largest grad_norm since the previous log"
        else:
            value, label = own if own is not None and math.isfinite(own) else gn, "grad_norm"
        if limit is None or value < limit:
            self._over_cap = False
            return None
        if self._over_cap:
            return None
        self._over_cap = True
        return Signal(
            "warning",
            f"{label} {fmt_number(value)} reached the absolute threshold {fmt_number(limit)}",
            {"grad_norm": value, "threshold": limit, "check": "absolute"},
            onset_step=previous + 1 if previous is not None else step,
        )
