"""Physics before history, for the gradient: a grad norm absurd for this model, judged from the first log.

The gradient of the freshly initialised model (step 1, before any update) sets the model's own scale: its size
follows from the architecture, the initialisation and the loss, none of which a bad learning rate has touched yet.
"""

from __future__ import annotations

import math

from msmon.config.health import GradNormBoundSettings
from msmon.health.alert import Signal
from msmon.health.detectors.base import Breaches, metric
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import fmt_number


class GradNormBoundDetector:
    """Fires when grad_norm (or ``grad_norm_max``, any step since the previous log) stays above ``factor`` x the
    initial grad norm for ``patience`` consecutive logs; re-arms once it is below again. The initial grad norm is
    the record's ``grad_norm_initial`` (the callback's value of step 1 when the first log comes later), else the
    first logged grad_norm (older records: a bound at most as strict).

    It cannot fire on a healthy start: with clipping or Adam's normalised updates a healthy run's grad norm stays
    within about 10x of its initial value (the recorded quickstart traces: at most 12.6x, at a learning rate 4x the
    quickstart's); a learning rate that blows the model up takes it 10^5 higher within a few steps.
    """

    name = "grad_norm_bound"

    def __init__(self, settings: GradNormBoundSettings) -> None:
        self.settings = settings
        self.initial: float | None = None
        self._breaches = Breaches(settings.patience)

    def observe(self, record: JsonObject) -> Signal | None:
        value = metric(record, "grad_norm")
        if self.initial is None:
            first = metric(record, "grad_norm_initial")
            first = first if first is not None else value
            self.initial = first if first is not None and math.isfinite(first) and first > 0 else None
        if self.initial is None or value is None or not math.isfinite(value):  # a NaN is the nonfinite detector's
            return None
        peak = metric(record, "grad_norm_max")  # any step since the previous log counts
        value = max(value, peak) if peak is not None and math.isfinite(peak) else value
        limit = self.settings.factor * self.initial
        if not self._breaches.update(value > limit, record.get("step")):
            return None
        return Signal(
            "critical",
            f"grad_norm {fmt_number(value, 5)} is above {fmt_number(self.settings.factor)} x its value at step 1 "
            f"({fmt_number(self.initial, 4)}, the initialised model) since step {self._breaches.since}: absurd for "
            "this model; check the learning rate, the loss scale and the data",
            {"grad_norm": value, "grad_norm_initial": self.initial, "limit": limit, "loss": metric(record, "loss")},
            onset_step=self._breaches.since,
        )
