"""A per-group series as a heatmap: groups x steps, each cell log10(value / the group's median over the run), so a
block that runs away from its own usual level shows while the others stay pale. Drawn for the gradient norms
(``grad_norm/<group>`` of ``layer_grad_norm``) and the update ratios (``update_ratio/<group>``). Long runs are split
into at most ``max_columns`` step buckets (of each group's sketch, ``msmon.view.sketch``); each bucket keeps its value
farthest from the baseline (its lowest or its highest: a one-log spike stays visible), and a non-finite value wins
its bucket. The baseline is the median of an even sample of each group's values (all of them up to 131,072)."""

from __future__ import annotations

import bisect
import math

from msmon.config.metrics import GROUP_NORM_PREFIX
from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import nonfinite_kind
from msmon.view.run_records import group_norms
from msmon.view.series import RunData
from msmon.view.sketch import median

MAX_COLUMNS = 600


def _cell(value: float | None, base: float | None) -> float | str | None:
    """log10(value / base), a non-finite kind ("nan", "inf", "-inf"), or None (absent, or no baseline)."""
    if value is None:
        return None
    kind = nonfinite_kind(value)
    if kind is not None:
        return kind
    if base is None or value <= 0:
        return None
    return math.log10(value / base)


def _strength(cell: float | str | None) -> float:
    if cell is None:
        return -1.0
    return math.inf if isinstance(cell, str) else abs(cell)


def heatmap(run: RunData, max_columns: int = MAX_COLUMNS, prefix: str = GROUP_NORM_PREFIX) -> JsonObject | None:
    """``{"groups", "baseline", "starts", "ends", "cells"}`` (``cells[g][c]``: group g in step bucket c), or None
    when the run recorded no series of ``prefix``."""
    norms = group_norms(run.records, prefix)
    buckets = next((sketch.buckets() for sketch in norms.values() if sketch.finite), [])
    if not buckets:
        return None
    columns = min(max_columns, len(buckets))
    bounds = [(len(buckets) * c // columns, len(buckets) * (c + 1) // columns) for c in range(columns)]
    starts = [buckets[lo][0] for lo, _ in bounds]
    ends = [buckets[hi - 1][6] for _, hi in bounds]
    baseline: dict[str, float | None] = {}
    cells = []
    for group, sketch in norms.items():
        baseline[group] = median(sketch, positive=True)
        row: list[float | str | None] = [None] * columns
        for first, _, _, low, _, high, _, _ in sketch.buckets():
            column = _column(starts, first)
            row[column] = max((row[column], _cell(low, baseline[group]), _cell(high, baseline[group])),
                              key=_strength)
        for step, kind in sketch.marks():
            column = _column(starts, step)
            if not isinstance(row[column], str):
                row[column] = kind
        cells.append(row)
    return {"groups": list(norms), "baseline": baseline, "cells": cells, "starts": starts, "ends": ends}


def _column(starts: list[int], step: int) -> int:
    """The column of ``step``: the last whose first step is not after it (the first for an earlier step)."""
    return max(0, bisect.bisect_right(starts, step) - 1)
