"""Learning-rate sanity against the configured schedule: invalid, above peak, zero, frozen."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from msmon.health.alert import Signal, fmt
from msmon.health.detectors.base import metric
from msmon.health.settings import LearningRateSettings

#: mindformers schedules whose LR keeps moving after the warm-up (until lr_end / decay_steps).
MOVING_TYPES = frozenset(
    {"CosineWithWarmUpLR", "LinearWithWarmUpLR", "PolynomialWithWarmUpLR", "CosineWithRestartsAndWarmUpLR",
     "CosineAnnealingLR", "cosine", "linear", "polynomial"}
)
ZERO_PATIENCE = 2  # one exact zero may be the last step of a schedule that decays to 0


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _steps(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number > 0 else None


@dataclass
class Schedule:
    """What the config says about the LR; unknown parts stay None."""

    type: str | None = None
    peak: float | None = None
    lr_end: float | None = None
    warmup_steps: int | None = None
    warmup_ratio: float | None = None
    total_steps: int | None = None
    decay_steps: int | None = None

    @property
    def warmup_end(self) -> int | None:
        if self.warmup_steps is not None:
            return self.warmup_steps
        if self.warmup_ratio is not None and self.total_steps:
            return int(self.warmup_ratio * self.total_steps)
        return None

    @property
    def decay_end(self) -> int | None:
        return self.decay_steps or self.total_steps

    @property
    def moves(self) -> bool:
        return self.type in MOVING_TYPES


def schedule_from_config(config: Mapping[str, Any] | None, settings: LearningRateSettings) -> Schedule:
    """Read ``lr_schedule`` (type, learning_rate, lr_end, warmup_steps/ratio, total/decay steps).

    With mindformers' ``lr_scale: True`` the applied peak is learning_rate x devices x batch / factor,
    so the configured value is no peak to check against (``learning_rate.peak`` can give it).
    """
    config = config or {}
    section = config.get("lr_schedule")
    section = section if isinstance(section, Mapping) else {}
    kind = section.get("type")
    scaled = config.get("lr_scale") is True
    schedule = Schedule(
        type=kind if isinstance(kind, str) else None,
        peak=None if scaled else _number(section.get("learning_rate")),
        lr_end=_number(section.get("lr_end", section.get("min_lr"))),
        warmup_steps=_steps(section.get("warmup_steps")),
        warmup_ratio=_number(section.get("warmup_ratio")),
        total_steps=_steps(section.get("total_steps")),
        decay_steps=_steps(section.get("decay_steps")),
    )
    if settings.peak is not None:
        schedule.peak = settings.peak
    if settings.warmup_steps is not None:
        schedule.warmup_steps = settings.warmup_steps
    return schedule


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

    def observe(self, record: dict[str, Any]) -> Signal | None:
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
                    severity = "critical" if kind == "invalid" else "warning"
                    signal = Signal(severity, message, {"learning_rate": lr, "check": kind, **self._context()})
        return signal

    def _context(self) -> dict[str, Any]:
        s = self.schedule
        return {"schedule": s.type, "peak": s.peak, "warmup_end": s.warmup_end, "decay_end": s.decay_end}

    def _invalid(self, lr: float) -> str | None:
        if math.isfinite(lr) and lr >= 0:
            return None
        return f"learning rate is {fmt(lr)}: it must be a finite, non-negative number"

    def _above_peak(self, lr: float) -> str | None:
        peak = self.schedule.peak
        if peak is None or not math.isfinite(lr) or lr <= peak * (1 + self.settings.tolerance):
            return None
        return f"learning rate {fmt(lr)} is above the configured peak {fmt(peak)}"

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
        if not s.moves or end is None or peak is None or end <= start or len(self._recent) < self._recent.maxlen:
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
            f"learning rate is frozen at {fmt(lr)} for {len(self._recent)} logs (steps {first_step}-{step}) "
            f"while the {s.type} schedule should move it by about {fmt(expected)}"
        )
