"""The distributions probe: at each logging step of its window, histograms with quantiles of each layer group's weights
and of their update (the logging step's own: the weights copied as the step begins, compared as it ends), written to
msmon's file, TensorBoard and MindSpore summary (msmon.engine.probe.distribution_files). The groups are those of
``layer_grad_norm``.

The gradients themselves are not here: the train step hands a callback only their squared sums (``local_norm``).
The weights are read to the host at the window's logging steps only (on a device: the whole model, once a log).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from msmon import layout
from msmon.engine.grad_groups import GradGroups, trained_weights
from msmon.engine.layer_summaries import WeightReader, reader_for_device
from msmon.engine.probe.distribution_files import DistributionFiles
from msmon.engine.probe.histograms import Histogram, histogram
from msmon.engine.probe.profile import ProbeFailure
from msmon.engine.probe.window import Window


def _host(value: Any) -> Any:
    return value.asnumpy() if hasattr(value, "asnumpy") else value


class DistributionsProbe:
    """One rank's histograms over one window."""

    def __init__(self, run_dir: Path, rank: int, window: Window, interval: int, network: Any) -> None:
        directory = layout.distributions_dir(run_dir, window.first_step, window.last_step, rank)
        self.output = str(directory.relative_to(run_dir))
        self._files = DistributionFiles(directory)
        self._interval = max(1, interval)
        self._network = network
        self._weights: list[Any] = []
        self._groups: GradGroups | None = None
        self._reader: WeightReader | None = None
        self._copy: Any = None
        self._written: list[int] = []

    def start(self) -> None:
        """ProbeFailure when the training's network exposes no trained weights."""
        weights = trained_weights(self._network) if self._network is not None else None
        if not weights:
            raise ProbeFailure("the train-step wrapper exposes neither weights nor optimizer.parameters")
        self._weights, self._groups = weights, GradGroups.of([w.name for w in weights])
        self._reader = reader_for_device()

    def step_begin(self, step: int) -> None:
        if step % self._interval == 0 and self._reader is not None:
            self._copy = self._reader.copy(self._weights)

    def step_end(self, step: int) -> None:
        copy, self._copy = self._copy, None
        if step % self._interval or copy is None or self._groups is None:
            return
        import numpy as np

        now = [_host(w) for w in self._weights]
        values: dict[str, Histogram] = {}
        for position, group in enumerate(self._groups.names):
            members = [i for i, g in enumerate(self._groups.index) if g == position]
            weights = np.concatenate([now[i].reshape(-1) for i in members]).astype(np.float64)
            before = np.concatenate([_host(copy[i]).reshape(-1) for i in members]).astype(np.float64)
            values[f"weights/{group}"] = histogram(weights)
            values[f"updates/{group}"] = histogram(weights - before)
        self._files.write(step, values)
        self._written.append(step)

    def stop(self, complete: bool) -> str:
        self._files.close()
        groups = len(self._groups.names) if self._groups is not None else 0
        steps = ", ".join(map(str, self._written)) or "none"
        return f"histograms of weights and updates of {groups} group(s) at logging step(s) {steps}"
