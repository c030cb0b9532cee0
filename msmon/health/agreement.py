"""Whether a run follows its references, offline: bit for bit at every common step, or inside the band the
``reference_drift`` detector judges live (the same detector, fed the run's curve): the first step where they part."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from msmon.config.health import ReferenceDriftSettings
from msmon.errors import MsmonError
from msmon.health.detectors.reference_drift import ReferenceDriftDetector
from msmon.reference.band import build_band
from msmon.reference.curve import ReferenceCurve
from msmon.util.numbers import fmt_number

EXACT_METRICS = ("loss", "grad_norm", "learning_rate")


@dataclass(frozen=True)
class Parting:
    """The first step where a run leaves its reference: which metric, its value, the reference's (and the band's
    edges when judged against a band)."""

    metric: str
    step: int
    value: float
    expected: float
    low: float | None = None
    high: float | None = None

    def describe(self) -> str:
        band = f" (band {fmt_number(self.low, 6)}-{fmt_number(self.high, 6)})" if self.low is not None else ""
        return (f"{self.metric} parts at step {self.step}: {fmt_number(self.value, 8)} against "
                f"{fmt_number(self.expected, 8)}{band}")


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def first_exact_parting(run: ReferenceCurve, reference: ReferenceCurve) -> tuple[Parting | None, int]:
    """(the first common step where a metric both curves hold differs in any bit, or None; the common steps).
    MsmonError when the curves share no step or no metric."""
    metrics = [m for m in EXACT_METRICS if m in run.series and m in reference.series]
    index = {step: i for i, step in enumerate(reference.steps)}
    common = [(i, index[step]) for i, step in enumerate(run.steps) if step in index]
    if not common or not metrics:
        raise MsmonError(f"{run.source} and {reference.source} share no logged step with a common metric",
                         "compare runs of one recipe, logged at common steps")
    for i, j in common:
        for metric in metrics:
            value, expected = run.series[metric][i], reference.series[metric][j]
            if not _same(value, expected):
                return Parting(metric, run.steps[i], value, expected), len(common)
    return None, len(common)


def first_band_parting(run: ReferenceCurve, references: Sequence[ReferenceCurve],
                       settings: ReferenceDriftSettings) -> Parting | None:
    """The first step where ``run`` leaves the band of ``references`` as the live detector judges it (its first
    alert's metric and onset), or None."""
    detector = ReferenceDriftDetector(settings, build_band(references, settings, run.global_batch_size))
    for i, step in enumerate(run.steps):
        signal = detector.observe({"step": step, **{m: values[i] for m, values in run.series.items()}})
        if signal is not None:
            metric = signal.values["metric"]
            return Parting(metric, signal.onset_step or step, signal.values[f"{metric}_level"],
                           signal.values[f"{metric}_center"], signal.values[f"{metric}_low"],
                           signal.values[f"{metric}_high"])
    return None
