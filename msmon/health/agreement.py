"""Whether a run follows its references, offline: bit for bit at every common step, or inside the band the
``reference_drift`` detector judges live (the same detector, fed the run's curve): the first step where they part."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

from msmon.config.health import ReferenceDriftSettings
from msmon.errors import MsmonError
from msmon.health.detectors.reference_drift import ReferenceDriftDetector
from msmon.reference.band import ReferenceBand, build_band
from msmon.reference.curve import ReferenceCurve
from msmon.reference.load import load_reference
from msmon.reference.parting import Parting, Verdict

EXACT_METRICS = ("loss", "grad_norm", "learning_rate")


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


def first_band_parting(run: ReferenceCurve, band: ReferenceBand, settings: ReferenceDriftSettings) -> Parting | None:
    """The first step where ``run`` leaves ``band`` as the live detector judges it (its first alert's metric and
    onset), or None."""
    detector = ReferenceDriftDetector(settings, band)
    for i, step in enumerate(run.steps):
        signal = detector.observe({"step": step, **{m: values[i] for m, values in run.series.items()}})
        if signal is not None:
            metric = signal.values["metric"]
            return Parting(metric, signal.onset_step or step, signal.values[f"{metric}_level"],
                           signal.values[f"{metric}_center"], signal.values[f"{metric}_low"],
                           signal.values[f"{metric}_high"])
    return None


def judge(paths: Sequence[str], exact: bool, tolerance: float | None) -> Verdict:
    """The first of ``paths`` against the others: bit for bit at every common logged step (``exact``), else inside
    the band ``health.reference_drift``'s defaults build from them (``tolerance``: its floor)."""
    if len(paths) < 2:
        raise MsmonError("compare --assert needs a run and at least one reference", "pass two or more runs")
    run, *references = [load_reference(Path(path)) for path in paths]
    others = ", ".join(map(str, paths[1:]))
    if exact:
        partings = [(ref, *first_exact_parting(run, ref)) for ref in references]
        parted = next(((ref, found) for ref, found, _ in partings if found is not None), None)
        if parted is None:
            steps = min(common for _, _, common in partings)
            return Verdict(None, None, f"{paths[0]} equals {others} bit for bit at every common logged step ({steps})")
        ref, found = parted
        return Verdict(found, None, f"{paths[0]} is not {ref.source} bit for bit: {found.describe()}")
    settings = ReferenceDriftSettings()
    settings = dataclasses.replace(settings, tolerance=tolerance) if tolerance is not None else settings
    band = build_band(references, settings, run.global_batch_size)
    parting = first_band_parting(run, band, settings)
    if parting is None:
        return Verdict(None, band, f"{paths[0]} stays inside the band of {others}")
    return Verdict(parting, band, f"{paths[0]} leaves the band of {others}: {parting.describe()}")
