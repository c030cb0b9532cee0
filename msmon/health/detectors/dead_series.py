"""Dead or fake series: grad_norm exactly 0, or a metric exactly constant over K logs."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from msmon.config.health import DeadSeriesSettings
from msmon.health.alert import Signal
from msmon.health.detectors.base import metric
from msmon.util.numbers import fmt_number

ZERO = "grad_norm=0"


class DeadSeriesDetector:
    """A network that stopped learning (grad_norm 0.0, loss frozen at ln(vocab)) or a metric that is
    a placeholder, not a measurement. Reports each finding once, until that series moves again."""

    name = "dead_series"

    def __init__(self, settings: DeadSeriesSettings) -> None:
        self.settings = settings
        self._recent: dict[str, deque[float]] = {m: deque(maxlen=max(settings.window, 2)) for m in settings.metrics}
        self._zeros = 0
        self._reported: set[str] = set()

    def observe(self, record: dict[str, Any]) -> Signal | None:
        found: list[str] = []
        values: dict[str, Any] = {}
        gn = metric(record, "grad_norm")
        if gn is not None:
            self._zeros = self._zeros + 1 if gn == 0 else 0
            if self._zeros == 0:
                self._reported.discard(ZERO)
            elif self._zeros >= self.settings.zero_patience and ZERO not in self._reported:
                self._reported.add(ZERO)
                found.append(f"grad_norm is exactly 0 for {self._zeros} logs (no gradient flows)")
                values["grad_norm"] = gn
        for name, recent in self._recent.items():
            value = metric(record, name)
            if value is None or not math.isfinite(value):
                continue
            recent.append(value)
            if len(recent) < (recent.maxlen or 0) or any(v != recent[0] for v in recent):
                self._reported.discard(name)
            elif name not in self._reported:
                self._reported.add(name)
                if not (name == "grad_norm" and value == 0 and ZERO in self._reported):
                    found.append(f"{name} is exactly {fmt_number(value)} for {len(recent)} logs")
                values[name] = value
        if not found:
            return None
        values["loss"] = metric(record, "loss")
        return Signal(
            "critical",
            "; ".join(found) + ": the network is dead or the series is a placeholder, not a measurement",
            values,
        )
