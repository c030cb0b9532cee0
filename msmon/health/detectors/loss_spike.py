"""Loss spikes: loss far above its recent level, measured in robust noise units; spikes stay out of it."""

from __future__ import annotations

import bisect
import math
from collections import deque

from msmon.config.health import LossSpikeSettings
from msmon.health.alert import Signal
from msmon.health.detectors.base import metric
from msmon.health.detectors.log_window import MedianWindow
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import fmt_number

MIN_REL_NOISE = 0.01  # the noise never counts as less than 1% of the level (a flat baseline)
Q75_OF_ABS_DIFF = 1.6268  # 75th percentile of |a - b| for a, b ~ N(0, sigma^2), in sigmas


def noise_of_sorted(changes: list[float]) -> float:
    """Noise sigma from the 75th percentile of the ascending step-to-step changes |b - a|: a falling trend does not
    inflate it, and the per-batch loss of a small batch (heavy-tailed, often two-moded) is not underestimated."""
    return changes[int(0.75 * (len(changes) - 1))] / Q75_OF_ABS_DIFF if changes else 0.0


class LossSpikeDetector:
    """Spike = loss > ratio x level AND (loss - level) > z_score x noise, on ``patience`` consecutive
    logs spanning ``span_steps`` steps.

    level = median of the last ``level_window`` accepted logs (short, so a fast-falling loss does not
    leave it behind); noise = from the step-to-step changes over ``window`` logs. Spiking values never
    enter the baseline (metaseq's rule): a loss that jumps and stays up is reported once, and stays
    reported until it comes back down.
    """

    name = "loss_spike"

    def __init__(self, settings: LossSpikeSettings) -> None:
        self.settings = settings
        self._baseline: deque[float] = deque(maxlen=max(settings.window, settings.level_window, 3))
        self._changes: list[float] = []  # |b - a| of each two neighbours in the baseline, ascending
        self._level = MedianWindow(max(settings.level_window, 1))  # the baseline's last level_window values
        self._streak = 0
        self._since: int | None = None
        self._last_normal: int | None = None  # the last step whose loss entered the baseline
        self._active = False

    def observe(self, record: JsonObject) -> Signal | None:
        loss = metric(record, "loss")
        step = record.get("step")
        if loss is None or not math.isfinite(loss) or not isinstance(step, int):
            return None
        s = self.settings
        if len(self._baseline) < max(s.warmup, 3):
            self._accept(loss, step)
            return None
        level = self._level.median()
        # at or below the level z <= 0 < z_score: the noise is not needed
        noise = max(noise_of_sorted(self._changes), MIN_REL_NOISE * abs(level), 1e-12) if loss > level else 1.0
        z = (loss - level) / noise
        if not (z > s.z_score and (level <= 0 or loss > s.ratio * level)):
            self._streak, self._since, self._active = 0, None, False
            self._accept(loss, step)
            return None
        self._streak += 1
        self._since = step if self._since is None else self._since
        if self._active or self._streak < s.patience or step - self._since < s.span_steps:
            return None
        self._active = True
        ratio = loss / level if level > 0 else math.inf
        onset = self._last_normal + 1 if self._last_normal is not None else self._since
        return Signal(
            "warning",
            f"loss spike: loss {fmt_number(loss)} is {ratio:.2g}x its recent level {fmt_number(level)} "
            f"({z:.3g} noise sigmas) for {self._streak} logs since step {self._since}",
            {"loss": loss, "level": level, "noise": noise, "ratio": ratio, "z": z, "logs": self._streak,
             "since_step": self._since},
            onset_step=onset,
        )

    def _accept(self, loss: float, step: int) -> None:
        """``loss`` enters the baseline (its change from the last value with it; a full baseline's oldest leaves)."""
        baseline, changes = self._baseline, self._changes
        if len(baseline) == baseline.maxlen:
            del changes[bisect.bisect_left(changes, abs(baseline[1] - baseline[0]))]
        if baseline:
            bisect.insort(changes, abs(loss - baseline[-1]))
        baseline.append(loss)
        self._level.append(loss)
        self._last_normal = step
