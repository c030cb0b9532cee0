"""Loss spikes: loss far above its recent level, measured in robust noise units; spikes stay out of it."""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import Any

from msmon.health.alert import Signal, fmt
from msmon.health.detectors.base import metric
from msmon.health.settings import LossSpikeSettings

MIN_REL_NOISE = 0.01  # the noise never counts as less than 1% of the level (a flat baseline)


def noise_scale(values: list[float]) -> float:
    """Robust noise sigma from step-to-step changes (a falling trend does not inflate it)."""
    diffs = [abs(b - a) for a, b in zip(values, values[1:], strict=False)]
    return 1.4826 * statistics.median(diffs) / math.sqrt(2) if diffs else 0.0


class LossSpikeDetector:
    """Spike = loss > ratio x level AND (loss - level) > z_score x noise, for ``patience`` logs.

    level = median of the last ``level_window`` accepted logs (short, so a fast-falling loss does not
    leave it behind); noise = MAD of the step-to-step changes over ``window`` logs. Spiking values, and
    values above half the z threshold, stay out of the baseline (metaseq's rule, with a margin), so the
    first logs of a spike cannot drag the level up; a full window of such values is a new level.
    """

    name = "loss_spike"

    def __init__(self, settings: LossSpikeSettings) -> None:
        self.settings = settings
        self._baseline: deque[float] = deque(maxlen=max(settings.window, settings.level_window, 3))
        self._streak = 0
        self._active = False
        self._held: list[float] = []

    def _accept(self, loss: float, suspicious: bool) -> None:
        """Suspiciously high values wait outside the baseline; a whole window of them is the new level."""
        if not suspicious:
            self._held.clear()
            self._baseline.append(loss)
            return
        self._held.append(loss)
        if len(self._held) >= self._baseline.maxlen:
            self._baseline.extend(self._held)
            self._held.clear()

    def observe(self, record: dict[str, Any]) -> Signal | None:
        loss = metric(record, "loss")
        if loss is None or not math.isfinite(loss):
            return None
        s = self.settings
        if len(self._baseline) < max(s.warmup, 3):
            self._baseline.append(loss)
            return None
        values = list(self._baseline)
        level = statistics.median(values[-max(s.level_window, 1) :])
        noise = max(noise_scale(values), MIN_REL_NOISE * abs(level), 1e-12)
        z = (loss - level) / noise
        if not (z > s.z_score and (level <= 0 or loss > s.ratio * level)):
            self._streak = 0
            self._active = False
            self._accept(loss, suspicious=z > s.z_score / 2)
            return None
        self._streak += 1
        if self._active or self._streak < s.patience:
            return None
        self._active = True
        ratio = loss / level if level > 0 else math.inf
        return Signal(
            "warning",
            f"loss spike: loss {fmt(loss)} is {ratio:.2g}x its recent level {fmt(level)} "
            f"({z:.3g} noise sigmas) for {self._streak} logs",
            {"loss": loss, "level": level, "noise": noise, "ratio": ratio, "z": z, "logs": self._streak},
        )
