"""A reference curve: the metrics of an earlier run by training step, held in arrays (a million steps in a few
tens of MB), and the builder that gathers one from any source."""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from msmon.errors import MsmonError

#: The metrics a reference curve holds, by msmon's names.
METRICS: tuple[str, ...] = ("loss", "grad_norm", "learning_rate", "step_time_ms")


class ReferenceKind(Enum):
    """What a reference was read from."""

    RUN = "msmon run"
    MINDFORMERS_LOG = "mindformers log"
    TENSORBOARD = "TensorBoard"
    TABLE = "table"


@dataclass(frozen=True)
class ReferenceCurve:
    """An earlier run's metrics by step: ``steps`` ascending and unique (1-based global steps), each series aligned
    with them (NaN where that step lacks the metric); ``global_batch_size``: the samples a step took, when the source
    says it."""

    source: Path
    kind: ReferenceKind
    steps: array  # array('q')
    series: Mapping[str, array]  # metric -> array('d')
    global_batch_size: int | None = None

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metrics the source has, in ``METRICS`` order."""
        return tuple(name for name in METRICS if name in self.series)

    def metric(self, name: str) -> array:
        """One metric's values, aligned with ``steps``; MsmonError naming the metrics there are when it is absent."""
        if name not in self.series:
            raise MsmonError(f"{self.source}: the {self.kind.value} has no {name}",
                             f"it has {', '.join(self.metrics)}")
        return self.series[name]

    def value(self, name: str, step: int) -> float:
        """``name`` at ``step``; NaN when the curve lacks that step or that metric there."""
        index = bisect_left(self.steps, step)
        if name not in self.series or index == len(self.steps) or self.steps[index] != step:
            return math.nan
        return self.series[name][index]

    def samples(self, step: int) -> int | None:
        """The samples consumed by the end of ``step`` (None without a global batch size)."""
        return step * self.global_batch_size if self.global_batch_size else None


class CurveBuilder:
    """Gathers (step, values) in any order; ``build`` sorts them and keeps the last values given for a step (a
    resumed run logs the steps after its checkpoint again)."""

    def __init__(self) -> None:
        self._steps = array("q")
        self._columns: dict[str, array] = {}
        self._ordered = True

    def __len__(self) -> int:
        return len(self._steps)

    def has(self, name: str) -> bool:
        """Whether some step has ``name``."""
        return name in self._columns

    def add(self, step: int, values: Mapping[str, float]) -> None:
        """One step's values (only the metrics it has)."""
        count = len(self._steps)
        if count and step <= self._steps[-1]:
            self._ordered = False
        self._steps.append(step)
        for name, value in values.items():
            if name not in self._columns:
                self._columns[name] = array("d", [math.nan]) * count
            self._columns[name].append(value)
        for column in self._columns.values():
            if len(column) == count:
                column.append(math.nan)

    def build(self, source: Path, kind: ReferenceKind, *, missing_loss: str,
              global_batch_size: int | None = None) -> ReferenceCurve:
        """The curve; MsmonError when the source has no step or no loss (``missing_loss``: the hint that says what
        the source has and how to name its loss)."""
        if not self._steps:
            raise MsmonError(f"{source}: no training step with a loss in this {kind.value}", missing_loss)
        if "loss" not in self._columns:
            raise MsmonError(f"{source}: no loss in this {kind.value}", missing_loss)
        steps, columns = self._steps, self._columns
        if not self._ordered:
            order = sorted(range(len(steps)), key=steps.__getitem__)  # stable: the last given of a step is last
            kept = [i for n, i in enumerate(order) if n + 1 == len(order) or steps[order[n + 1]] != steps[i]]
            steps = array("q", (steps[i] for i in kept))
            columns = {name: array("d", (column[i] for i in kept)) for name, column in columns.items()}
        return ReferenceCurve(source, kind, steps, dict(columns), global_batch_size)
