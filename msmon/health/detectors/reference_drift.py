"""Against a reference: the run leaves the band its reference runs draw (monitor_config.reference), judged from the
first log the references cover."""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import ClassVar

from msmon.config.health import ReferenceDriftSettings
from msmon.health.alert import Signal
from msmon.health.detectors.base import Breaches, metric
from msmon.reference.band import Position, ReferenceBand
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import fmt_number


class ReferenceDriftDetector:
    """Fires when a metric's level (the median of its logs over ``smooth_steps``, as the band smooths the references)
    lies outside the band for ``patience`` consecutive logs; names the metric, the first step outside (where the runs
    parted) and by how much. Once per excursion of each metric; silent where the references end."""

    name: ClassVar[str] = "reference_drift"

    def __init__(self, settings: ReferenceDriftSettings, band: ReferenceBand) -> None:
        self.settings = settings
        self.band = band
        self._recent: dict[str, deque[tuple[int, float]]] = {m: deque() for m in band.bands}
        self._breaches = {m: Breaches(settings.patience) for m in band.bands}

    def observe(self, record: JsonObject) -> Signal | None:
        step = record.get("step")
        if not isinstance(step, int):
            return None
        parted: list[tuple[str, Position, int | None]] = []
        for name, recent in self._recent.items():
            position = self._position(name, step, recent, metric(record, name))
            if position is not None and self._breaches[name].update(position.outside, step):
                parted.append((name, position, self._breaches[name].since))
        if not parted:
            return None
        onset = min((since for _, _, since in parted if since is not None), default=step)
        return Signal(
            "critical",
            "; ".join(self._text(name, position, since) for name, position, since in parted)
            + f" ({self.band.describe()}): the run does not follow its reference",
            {"metric": parted[0][0], "parted_at": onset,
             **{f"{name}_{key}": value for name, position, _ in parted
                for key, value in (("level", position.level), ("center", position.center), ("low", position.low),
                                   ("high", position.high))}},
            onset_step=onset,
        )

    def _position(self, name: str, step: int, recent: deque[tuple[int, float]], value: float | None) -> Position | None:
        if value is None or not math.isfinite(value) or value <= 0:  # a NaN is the nonfinite detector's
            return None
        while recent and recent[-1][0] >= step:  # the steps went back (a restart from a checkpoint): theirs go
            recent.pop()
        recent.append((step, math.log(value)))
        while recent[0][0] <= step - self.settings.smooth_steps:
            recent.popleft()
        # the level stands at its window's median step, as the band's smoothed references do (msmon.reference.band)
        return self.band.at(name, statistics.median([s for s, _ in recent]),
                            math.exp(statistics.median([v for _, v in recent])))

    @staticmethod
    def _text(name: str, position: Position, since: int | None) -> str:
        return (f"{name} left the reference band at step {since}: {fmt_number(position.level, 4)} against "
                f"{fmt_number(position.center, 4)} ({position.deviation():+.0%}; band {fmt_number(position.low, 4)}"
                f"-{fmt_number(position.high, 4)})")
