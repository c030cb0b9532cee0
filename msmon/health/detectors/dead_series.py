"""Dead or fake series: grad_norm exactly 0, or a metric exactly constant over K logs."""

from __future__ import annotations

import math

from msmon.config.health import DeadSeriesSettings
from msmon.health.alert import Signal
from msmon.health.detectors.base import metric
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import fmt_number

ZERO = "grad_norm=0"


class DeadSeriesDetector:
    """A network that stopped learning (grad_norm 0.0, loss frozen at ln(vocab)) or a metric that is
    a placeholder, not a measurement. Reports each finding once, until that series moves again."""

    name = "dead_series"

    def __init__(self, settings: DeadSeriesSettings) -> None:
        self.settings = settings
        self._logs = max(settings.window, 2)  # a series this many logs at one value is constant
        # each series' last value and how many logs in a row it held (up to self._logs)
        self._runs: dict[str, tuple[float, int]] = dict.fromkeys(settings.metrics, (math.nan, 0))
        self._zeros = 0
        self._reported: set[str] = set()

    def observe(self, record: JsonObject) -> Signal | None:
        found: list[str] = []
        values: JsonObject = {}
        gn = metric(record, "grad_norm")
        if gn is not None:
            self._zeros = self._zeros + 1 if gn == 0 else 0
            if self._zeros == 0:
                self._reported.discard(ZERO)
            elif self._zeros >= self.settings.zero_patience and ZERO not in self._reported:
                self._reported.add(ZERO)
                found.append(f"grad_norm is exactly 0 for {self._zeros} logs (no gradient flows)")
                values["grad_norm"] = gn
        for name, (last, held) in self._runs.items():
            value = metric(record, name)
            if value is None or not math.isfinite(value):
                continue
            held = min(held + 1, self._logs) if value == last else 1
            self._runs[name] = value, held
            if held < self._logs:
                self._reported.discard(name)
            elif name not in self._reported:
                self._reported.add(name)
                if not (name == "grad_norm" and value == 0 and ZERO in self._reported):
                    found.append(f"{name} is exactly {fmt_number(value)} for {held} logs")
                values[name] = value
        if not found:
            return None
        values["loss"] = metric(record, "loss")
        return Signal(
            "critical",
            "; ".join(found) + ": the network is dead or the series is a placeholder, not a measurement",
            values,
        )
