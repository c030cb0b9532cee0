"""The learning-rate schedule as the training config states it (``lr_schedule``, or ``grouped_lr_schedule``, whose
``default`` mindformers builds instead when the config has one), read once for the health detector
(msmon/health/detectors/learning_rate.py) and the pre-flight checks (msmon/validate/learning_rate.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from msmon.config.health import LearningRateSettings
from msmon.foreign import ConfigValue
from msmon.util.numbers import as_number, positive_int

#: mindformers schedules whose LR keeps moving after the warm-up (until lr_end / decay_steps).
MOVING_TYPES = frozenset(
    {"CosineWithWarmUpLR", "LinearWithWarmUpLR", "PolynomialWithWarmUpLR", "CosineWithRestartsAndWarmUpLR",
     "CosineAnnealingLR", "cosine", "linear", "polynomial"}
)


def _config_number(value: ConfigValue) -> float | None:
    return as_number(value, parse_strings=True)


def _config_steps(value: ConfigValue) -> int | None:
    return positive_int(as_number(value, parse_strings=True))


@dataclass
class Schedule:
    """What the config says about the LR; unknown parts stay None."""

    type: str | None = None
    path: str = "lr_schedule"  # where the config states it (``grouped_lr_schedule.default``, ...)
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


def stated_schedules(config: Mapping[str, ConfigValue] | None) -> list[tuple[str, Mapping[str, ConfigValue]]]:
    """(dotted path, section) of every schedule mindformers builds, the optimizer's own first: with
    ``grouped_lr_schedule`` its ``default`` and each ``grouped`` entry (``lr_schedule`` is then unused), else
    ``lr_schedule``."""
    config = config or {}
    grouped = config.get("grouped_lr_schedule")
    if isinstance(grouped, Mapping):
        default = grouped.get("default")
        found = [("grouped_lr_schedule.default", default if isinstance(default, Mapping) else {})]
        entries = grouped.get("grouped")
        found += [(f"grouped_lr_schedule.grouped[{index}]", entry)
                  for index, entry in enumerate(entries if isinstance(entries, list) else [])
                  if isinstance(entry, Mapping)]
        return found
    section = config.get("lr_schedule")
    return [("lr_schedule", section if isinstance(section, Mapping) else {})]


def schedule_from_config(config: Mapping[str, ConfigValue] | None, settings: LearningRateSettings) -> Schedule:
    """The schedule of the optimizer's learning rate (the first of ``stated_schedules``), with the peak and
    warm-up ``settings`` (``monitor_config.health.learning_rate``) give."""
    path, section = stated_schedules(config)[0]
    schedule = read_schedule(config, path, section)
    if settings.peak is not None:
        schedule.peak = settings.peak
    if settings.warmup_steps is not None:
        schedule.warmup_steps = settings.warmup_steps
    return schedule


def read_schedule(config: Mapping[str, ConfigValue] | None, path: str, section: Mapping[str, ConfigValue]) -> Schedule:
    """One stated schedule (type, learning_rate, lr_end, warmup_steps/ratio, total/decay steps).

    With mindformers' ``lr_scale: True`` the applied peak is learning_rate x devices x batch / factor,
    so the configured value is no peak to check against (``monitor_config.health.learning_rate.peak`` can give it).
    """
    kind = section.get("type")
    scaled = (config or {}).get("lr_scale") is True
    return Schedule(
        type=kind if isinstance(kind, str) else None,
        path=path,
        peak=None if scaled else _config_number(section.get("learning_rate")),
        lr_end=_config_number(section.get("lr_end", section.get("min_lr"))),
        warmup_steps=_config_steps(section.get("warmup_steps")),
        warmup_ratio=_config_number(section.get("warmup_ratio")),
        total_steps=_config_steps(section.get("total_steps")),
        decay_steps=_config_steps(section.get("decay_steps")),
    )
