"""Learning-rate sanity against the configured schedule: invalid, above peak, zero, frozen."""

from __future__ import annotations

import math
from collections import deque

from msmon.config.health import LearningRateSettings
from msmon.config.schedule import Schedule
from msmon.health.alert import Signal
from msmon.health.detectors.base import metric
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import fmt_number

ZERO_PATIENCE = 2  # one exact zero may be the last step of a schedule that decays to 0


class LearningRateDetector:
    """Four checks; each reports once when it becomes true and re-arms when it clears.

    - invalid: negative or non-finite (critical);
    - above_peak: above the configured peak;
    - zero: exactly 0 for two logs after the warm-up (+ grace) once it had been positive;
    - frozen: exactly constant over ``constant_window`` logs inside the middle 80% of a moving
      schedule's decay, where the schedule must visibly change it (needs the total steps).
    """

    name = "learning_rate"

    def __init__(self, settings: LearningRateSettings, schedule: Schedule) -> None:
        self.settings = settings
        self.schedule = schedule
        self._recent: deque[tuple[int, float]] = deque(maxlen=max(settings.constant_window, 2))
        self._zeros = 0
        self._seen_positive = False
        self._active: set[str] = set()

    def observe(self, record: JsonObject) -> Signal | None:
        lr = metric(record, "learning_rate")
        step = record.get("step")
        if lr is None or not isinstance(step, int):
            return None
        found = {
            "invalid": self._invalid(lr),
            "above_peak": self._above_peak(lr),
            "zero": self._zero(lr, step),
            "frozen": self._frozen(lr, step),
        }
        signal = None
        for kind, message in found.items():
            if message is None:
                self._active.discard(kind)
            elif kind not in self._active:
                self._active.add(kind)
                if signal is None:
                    values = {"learning_rate": lr, "check": kind, **self._context()}
                    signal = Signal("critical" if kind == "invalid" else "warning", message, values)
        return signal

    def _context(self) -> JsonObject:
        s = self.schedule
        return {"schedule": s.type, "peak": s.peak, "warmup_end": s.warmup_end, "decay_end": s.decay_end}

    def _invalid(self, lr: float) -> str | None:
        if math.isfinite(lr) and lr >= 0:
            return None
        return f"learning rate is {fmt_number(lr)}: it must be a finite, non-negative number"

    def _above_peak(self, lr: float) -> str | None:
        peak = self.schedule.peak
        if peak is None or not math.isfinite(lr) or lr <= peak * (1 + self.settings.tolerance):
            return None
        return f"learning rate {fmt_number(lr)} is above the configured peak {fmt_number(peak)}"

    def _zero(self, lr: float, step: int) -> str | None:
        self._zeros = self._zeros + 1 if lr == 0 else 0
        self._seen_positive = self._seen_positive or (math.isfinite(lr) and lr > 0)
        after = (self.schedule.warmup_end or 0) + self.settings.zero_grace_steps
        if self._zeros < ZERO_PATIENCE or not self._seen_positive or step < after:
            return None
        return f"learning rate is exactly 0 for {self._zeros} logs at step {step}, after the warm-up: nothing learns"

    def _frozen(self, lr: float, step: int) -> str | None:
        self._recent.append((step, lr))
        s = self.schedule
        start, end, peak = s.warmup_end or 0, s.decay_end, s.peak
        if not s.moves or end is None or peak is None or end <= start or len(self._recent) < (self._recent.maxlen or 0):
            return None
        first_step, first_lr = self._recent[0]
        if any(v != first_lr for _, v in self._recent):
            return None
        span = end - start
        if first_step < start + 0.1 * span or step > start + 0.9 * span:
            return None
        lr_end = s.lr_end or 0.0
        # the slowest part of the middle 80% of a cosine still moves at 0.49 x the average slope
        expected = 0.49 * (step - first_step) * abs(peak - lr_end) / span
        if expected < 1e-4 * peak:
            return None
        return (
            f"learning rate is frozen at {fmt_number(lr)} for {len(self._recent)} logs (steps {first_step}-{step}) "
            f"while the {s.type} schedule should move it by about {fmt_number(expected)}"
        )
