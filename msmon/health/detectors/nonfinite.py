"""NaN or Inf in loss or grad_norm (also in loss_mean: any step since the previous log): critical, at once."""

from __future__ import annotations

from msmon.config.health import NonFiniteSettings
from msmon.config.metrics import nonfinite_values
from msmon.health.alert import Signal
from msmon.health.detectors.base import metric
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import fmt_number

LABELS = {"loss_mean": "loss_mean (a step since the previous log had a non-finite loss)"}


class NonFiniteDetector:
    """Fires when a non-finite value appears; re-arms once the values are finite again.

    A non-finite grad_norm on a step the loss-scale wrapper flagged as overflow is expected (the
    update is skipped and the scale lowered), so it does not count. ``loss_mean`` keeps a non-finite
    loss of any step since the previous log, so a NaN between two logs is found at the next one.
    """

    name = "nonfinite"

    def __init__(self, settings: NonFiniteSettings) -> None:
        self.settings = settings
        self._active = False
        self._previous: int | None = None  # the step of the record before: a NaN in loss_mean began after it

    def observe(self, record: JsonObject) -> Signal | None:
        bad = nonfinite_values(record)
        step, previous = record.get("step"), self._previous
        self._previous = step if isinstance(step, int) else previous
        if not bad:
            self._active = False
            return None
        if self._active:
            return None
        self._active = True
        names = " and ".join(f"{LABELS.get(key, key)} is {fmt_number(value)}" for key, value in bad.items())
        return Signal(
            "critical",
            f"{names}: the run has diverged or hit a bad batch; later updates are meaningless",
            {**bad, "loss": metric(record, "loss"), "grad_norm": metric(record, "grad_norm")},
            onset_step=previous + 1 if previous is not None else step if isinstance(step, int) else None,
        )
