"""A per-group series as a heatmap: groups x steps, each cell log10(value / the group's median over the run), so a
block that runs away from its own usual level shows while the others stay pale. Drawn for the gradient norms
(``grad_norm/<group>`` of ``layer_grad_norm``) and the update ratios (``update_ratio/<group>``). Long runs are
split into at most ``max_columns`` step buckets; each bucket keeps its value farthest from the baseline (a one-log
spike stays visible), and a non-finite value wins its bucket."""

from __future__ import annotations

import math
import statistics
from typing import Any

from msmon.config.metrics import GROUP_NORM_PREFIX, norm_group
from msmon.util.numbers import as_number, nonfinite_kind
from msmon.view.series import RunData

MAX_COLUMNS = 600


def groups_of(run: RunData, prefix: str = GROUP_NORM_PREFIX) -> list[str]:
    """The run's groups of ``prefix`` in the order the records hold them (the callback writes display order)."""
    seen: dict[str, None] = {}
    for record in run.records:
        for key in record:
            group = norm_group(key, prefix)
            if group is not None:
                seen.setdefault(group, None)
    return list(seen)


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


def heatmap(run: RunData, max_columns: int = MAX_COLUMNS, prefix: str = GROUP_NORM_PREFIX) -> dict[str, Any] | None:
    """``{"groups", "baseline", "starts", "ends", "cells"}`` (``cells[g][c]``: group g in step bucket c), or None
    when the run recorded no series of ``prefix``."""
    groups = groups_of(run, prefix)
    rows = [r for r in run.records if any(norm_group(k, prefix) is not None for k in r)]
    if not groups or not rows:
        return None
    values = {g: [as_number(r.get(prefix + g)) for r in rows] for g in groups}
    baseline: dict[str, float | None] = {}
    for group, series in values.items():
        usable = [v for v in series if v is not None and math.isfinite(v) and v > 0]
        baseline[group] = statistics.median(usable) if usable else None
    columns = min(max_columns, len(rows))
    bounds = [(len(rows) * c // columns, len(rows) * (c + 1) // columns) for c in range(columns)]
    cells = []
    for group in groups:
        row = []
        for lo, hi in bounds:
            bucket = [_cell(v, baseline[group]) for v in values[group][lo:hi]]
            row.append(max(bucket, key=_strength))
        cells.append(row)
    return {"groups": groups, "baseline": baseline, "cells": cells,
            "starts": [rows[lo]["step"] for lo, _ in bounds], "ends": [rows[hi - 1]["step"] for _, hi in bounds]}
