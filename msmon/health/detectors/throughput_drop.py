"""Throughput drop: the recent median stays below a fraction of the baseline median (a starving pipeline)."""

from __future__ import annotations

import math
from collections import deque

from msmon.config.health import ThroughputDropSettings
from msmon.health.alert import Signal
from msmon.health.detectors.base import metric
from msmon.health.detectors.log_window import MedianWindow, median_of_sorted
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import fmt_number


def speed(record: JsonObject) -> tuple[str, float] | None:
    """(name, value) of the record's speed: throughput, else samples/s, else 1000 / step_time_ms."""
    for key in ("throughput", "samples_per_s"):
        value = metric(record, key)
        if value is not None and math.isfinite(value) and value > 0:
            return key, value
    ms = metric(record, "step_time_ms")
    if ms is not None and math.isfinite(ms) and ms > 0:
        return "steps_per_s", 1000.0 / ms
    return None


class ThroughputDropDetector:
    """Slow = median of the last ``patience`` logs < fraction x baseline median, for ``min_steps`` steps.

    Single slow steps (a neighbour on the host, a checkpoint) do not move a median; slow values never
    enter the baseline, so a lasting drop is reported once and stays reported until speed returns.
    """

    name = "throughput_drop"

    def __init__(self, settings: ThroughputDropSettings) -> None:
        self.settings = settings
        self._baseline = MedianWindow(max(settings.window, 1))
        self._recent: deque[float] = deque(maxlen=max(settings.patience, 1))
        self._seen = 0
        self._since: int | None = None
        self._active = False

    def resumed(self) -> None:
        """A restart from a checkpoint: its first log holds a graph compilation again."""
        self._seen = 0

    def observe(self, record: JsonObject) -> Signal | None:
        found = speed(record)
        step = record.get("step")
        if found is None or not isinstance(step, int):
            return None
        name, value = found
        self._seen += 1
        s = self.settings
        if self._seen == 1:  # the first log holds the graph compilation
            return None
        self._recent.append(value)
        if len(self._baseline) < max(s.warmup, 1):
            self._baseline.append(value)
            return None
        base = self._baseline.median()
        current = median_of_sorted(sorted(self._recent))
        if value >= s.fraction * base:
            self._baseline.append(value)  # slow values never enter the baseline, even between slow medians
        if current >= s.fraction * base:
            self._since = None
            self._active = False
            return None
        self._since = step if self._since is None else self._since
        if self._active or step - self._since < s.min_steps or len(self._recent) < (self._recent.maxlen or 0):
            return None
        self._active = True
        return Signal(
            "warning",
            f"{name} has stayed at {current / base:.0%} of its usual {fmt_number(base)} since step {self._since} "
            f"(now {fmt_number(value)}): something, often the data pipeline, is starving the training",
            {name: value, "recent_median": current, "baseline_median": base, "fraction": current / base,
             "since_step": self._since},
        )
