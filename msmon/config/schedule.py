"""The learning-rate schedule as the training config states it (``lr_schedule``), read once for the health
detector (msmon/health/detectors/learning_rate.py) and the pre-flight checks (msmon/validate/learning_rate.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from msmon.config.health import LearningRateSettings
from msmon.util.numbers import as_number, positive_int

#: mindformers schedules whose LR keeps moving after the warm-up (until lr_end / decay_steps).
MOVING_TYPES = frozenset(
    {"CosineWithWarmUpLR", "LinearWithWarmUpLR", "PolynomialWithWarmUpLR", "CosineWithRestartsAndWarmUpLR",
     "CosineAnnealingLR", "cosine", "linear", "polynomial"}
)


def _config_number(value: Any) -> float | None:
    return as_number(value, parse_strings=True)


def _config_steps(value: Any) -> int | None:
    return positive_int(as_number(value, parse_strings=True))


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
        peak=None if scaled else _config_number(section.get("learning_rate")),
        lr_end=_config_number(section.get("lr_end", section.get("min_lr"))),
        warmup_steps=_config_steps(section.get("warmup_steps")),
        warmup_ratio=_config_number(section.get("warmup_ratio")),
        total_steps=_config_steps(section.get("total_steps")),
        decay_steps=_config_steps(section.get("decay_steps")),
    )
    if settings.peak is not None:
        schedule.peak = settings.peak
    if settings.warmup_steps is not None:
        schedule.warmup_steps = settings.warmup_steps
    return schedule
