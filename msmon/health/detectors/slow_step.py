"""The slow step: one logged step far above the median of the recent ones (a hiccup: another process on the host,
swapping, a stalled read). Steps that save a checkpoint or evaluate are slow by design and not judged."""

from __future__ import annotations

import math
import statistics
from collections import deque

from msmon.config.health import SlowStepSettings
from msmon.health.alert import Signal
from msmon.health.detectors.base import metric
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import fmt_number


class SlowStepDetector:
    """Slow = ``step_time_ms`` > factor x the median of the last ``window`` logged steps and ``min_excess_ms`` more;
    every slow step is its own alert; slow steps never enter the median."""

    name = "slow_step"

    def __init__(self, settings: SlowStepSettings, slow_by_design: tuple[int, ...] = ()) -> None:
        self.settings = settings
        self.slow_by_design = tuple(i for i in slow_by_design if i > 0)  # step intervals that save or evaluate
        self._recent: deque[float] = deque(maxlen=settings.window)
        self._seen = 0

    def resumed(self) -> None:
        """A restart from a checkpoint: its first log holds a graph compilation again."""
        self._seen = 0

    def observe(self, record: JsonObject) -> Signal | None:
        ms = metric(record, "step_time_ms")
        step = record.get("step")
        if ms is None or not math.isfinite(ms) or ms <= 0 or not isinstance(step, int):
            return None
        self._seen += 1
        if self._seen == 1 or any(step % interval == 0 for interval in self.slow_by_design):
            return None
        s = self.settings
        if len(self._recent) < s.warmup:
            self._recent.append(ms)
            return None
        median = statistics.median(self._recent)
        if ms <= s.factor * median or ms - median < s.min_excess_ms:
            self._recent.append(ms)
            return None
        return Signal(
            "warning",
            f"step {step} took {fmt_number(ms)} ms, {ms / median:.1f}x the median {fmt_number(median)} ms of the last "
            f"{len(self._recent)} logged steps",
            {"step_time_ms": ms, "median_ms": median, "ratio": ms / median},
        )
