"""One group's values at one step as a histogram with quantiles (the distributions probe's unit of output): finite
values in ``BINS`` equal-width buckets between their min and max, NaN and +-Inf counted apart, and the quantiles of
the finite values. Pure numpy: no files, no MindSpore."""

from __future__ import annotations

from dataclasses import dataclass

from msmon.foreign import Tensor
from msmon.util.jsonfiles import JsonObject

BINS = 30
QUANTILES: tuple[float, ...] = (0.001, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 0.999)


@dataclass(frozen=True)
class Histogram:
    """``counts[i]`` finite values in [``edges[i]``, ``edges[i+1]``) (the last bucket closed)."""

    count: int  # every value, NaN and Inf included
    nan: int
    pos_inf: int
    neg_inf: int
    minimum: float  # of the finite values (NaN when there is none)
    maximum: float
    total: float  # their sum
    squares: float  # their sum of squares
    edges: tuple[float, ...]
    counts: tuple[int, ...]
    quantiles: tuple[float, ...]  # at QUANTILES

    def to_json(self) -> JsonObject:
        return {"count": self.count, "nan": self.nan, "pos_inf": self.pos_inf, "neg_inf": self.neg_inf,
                "min": self.minimum, "max": self.maximum, "sum": self.total, "sum_squares": self.squares,
                "edges": list(self.edges), "counts": list(self.counts),
                "quantiles": {str(q): v for q, v in zip(QUANTILES, self.quantiles, strict=True)}}


def histogram(values: Tensor) -> Histogram:
    """The histogram of a flat float array (float64 sums)."""
    import numpy as np

    flat = np.asarray(values).reshape(-1)
    finite = flat[np.isfinite(flat)].astype(np.float64)
    nan = int(np.isnan(flat).sum())
    pos_inf = int(np.isposinf(flat).sum())
    neg_inf = int(np.isneginf(flat).sum())
    if finite.size == 0:
        return Histogram(int(flat.size), nan, pos_inf, neg_inf, float("nan"), float("nan"), 0.0, 0.0, (), (),
                         tuple(float("nan") for _ in QUANTILES))
    low, high = float(finite.min()), float(finite.max())
    counts, edges = np.histogram(finite, bins=BINS, range=(low, high) if high > low else (low - 0.5, high + 0.5))
    return Histogram(int(flat.size), nan, pos_inf, neg_inf, low, high, float(finite.sum()),
                     float(np.einsum("i,i->", finite, finite)), tuple(float(e) for e in edges),
                     tuple(int(c) for c in counts), tuple(float(q) for q in np.quantile(finite, QUANTILES)))
