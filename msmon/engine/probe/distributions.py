"""The distributions probe: at each logging step of its window, histograms with quantiles of each layer group's weights,
of their update (the logging step's own: the weights copied as the step begins, compared as it ends) and of the
gradient the optimizer received (from its first moment, copied and read the same way: msmon.engine.probe.gradients),
written to msmon's file, TensorBoard and MindSpore summary (msmon.engine.probe.distribution_files). The groups are
those of ``layer_grad_norm``.

The weights and moments are read to the host at the window's logging steps only (on a device: the whole model and
its first moments, once a log).
"""

from __future__ import annotations

from pathlib import Path

from msmon import layout
from msmon.engine.grad_groups import GradGroups, trained_weights
from msmon.engine.layer_summaries import WeightReader, reader_for_device
from msmon.engine.probe.distribution_files import DistributionFiles
from msmon.engine.probe.gradients import FirstMoments, first_moments
from msmon.engine.probe.histograms import Histogram, histogram
from msmon.engine.probe.profile import ProbeFailure
from msmon.engine.probe.window import Window
from msmon.engine.record import to_host
from msmon.foreign import Cell, Tensor


class DistributionsProbe:
    """One rank's histograms over one window."""

    def __init__(self, run_dir: Path, rank: int, window: Window, interval: int, network: Cell) -> None:
        directory = layout.distributions_dir(run_dir, window.first_step, window.last_step, rank)
        self.output = str(directory.relative_to(run_dir))
        self._files = DistributionFiles(directory)
        self._interval = max(1, interval)
        self._network = network
        self._weights: list[Tensor] = []
        self._groups: GradGroups | None = None
        self._reader: WeightReader | None = None
        self._moments: FirstMoments | None = None
        self._no_gradients = ""  # why there are no gradient histograms at all
        self._copy: Tensor = None
        self._written: list[int] = []
        self._optimizer_idle: list[int] = []  # logging steps at which the optimizer did not run: no gradients

    def start(self) -> None:
        """ProbeFailure when the training's network exposes no trained weights."""
        weights = trained_weights(self._network) if self._network is not None else None
        if not weights:
            raise ProbeFailure("the train-step wrapper exposes neither weights nor optimizer.parameters")
        self._weights, self._groups = weights, GradGroups.of([w.name for w in weights])
        self._moments, self._no_gradients = first_moments(getattr(self._network, "optimizer", None), weights)
        self._reader = reader_for_device()

    def _copied(self) -> list[Tensor]:
        """What a logging step reads at its begin and end: the weights, then the first moments and the step count."""
        moments = [*self._moments.states, self._moments.step] if self._moments is not None else []
        return [*self._weights, *moments]

    def step_begin(self, step: int) -> None:
        if step % self._interval == 0 and self._reader is not None:
            self._copy = self._reader.copy(self._copied())

    def step_end(self, step: int) -> None:
        copy, self._copy = self._copy, None
        if step % self._interval or copy is None or self._groups is None:
            return
        import numpy as np

        now, then = [to_host(v) for v in self._copied()], [to_host(v) for v in copy]
        count = len(self._weights)
        gradients = self._gradients(step, then[count:], now[count:])

        def joined(arrays: list[Tensor], members: list[int]) -> Tensor:
            return np.concatenate([arrays[i].reshape(-1) for i in members]).astype(np.float64)

        values: dict[str, Histogram] = {}
        for position, group in enumerate(self._groups.names):
            members = [i for i, g in enumerate(self._groups.index) if g == position]
            weights = joined(now, members)
            values[f"weights/{group}"] = histogram(weights)
            values[f"updates/{group}"] = histogram(weights - joined(then, members))
            if gradients is not None:
                values[f"gradients/{group}"] = histogram(joined(gradients, members))
        self._files.write(step, values)
        self._written.append(step)

    def _gradients(self, step: int, before: list[Tensor], after: list[Tensor]) -> list[Tensor] | None:
        """Each weight's gradient at this step from the moments (and step count) before and after it, or None: no
        first moment, or the optimizer did not run (its step count did not advance)."""
        if self._moments is None:
            return None
        if int(after[-1].reshape(-1)[0]) != int(before[-1].reshape(-1)[0]) + 1:
            self._optimizer_idle.append(step)
            return None
        return self._moments.gradients(before[:-1], after[:-1])

    def stop(self, complete: bool) -> str:
        self._files.close()
        groups = len(self._groups.names) if self._groups is not None else 0
        steps = ", ".join(map(str, self._written)) or "none"
        kinds = "weights and updates" if self._moments is None else "weights, updates and gradients"
        said = f"histograms of {kinds} of {groups} group(s) at logging step(s) {steps}"
        if self._no_gradients:
            said += f"; no gradients: {self._no_gradients}"
        if self._optimizer_idle:
            idle = ", ".join(map(str, self._optimizer_idle))
            said += f"; no gradients at step(s) {idle}: the optimizer did not run (an overflow or a skipped step)"
        return said
